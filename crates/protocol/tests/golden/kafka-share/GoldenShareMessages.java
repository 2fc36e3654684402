// Writes Kafka's own encoding of the share-group state and streams-group messages Osprey's
// codec must match: InitializeShareGroupState (83), ReadShareGroupState (84),
// WriteShareGroupState (85), DeleteShareGroupState (86), ReadShareGroupStateSummary (87),
// StreamsGroupHeartbeat (88) and StreamsGroupDescribe (89), requests and responses, at every
// version Kafka 4.4 has, with the values `tests/share_golden.rs` builds. One
// `<Message>-v<N>.hex` per message and version, each the body without header. The records
// of `__share_group_state` are written as Kafka writes them into the log: one
// `<Key>-record.hex` (int16 record type, then the key) and `<Value>-record.hex` (int16
// version, then the value). Regenerate with:
//   javac -cp kafka-clients-4.4.0.jar:kafka-share-coordinator-4.4.0.jar -d /tmp/g GoldenShareMessages.java
//   java -cp kafka-clients-4.4.0.jar:kafka-share-coordinator-4.4.0.jar:/tmp/g GoldenShareMessages .
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.*;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.coordinator.share.generated.*;

public class GoldenShareMessages {
    static final Uuid A = new Uuid(0x0102030405060708L, 0x090a0b0c0d0e0f10L);
    static final Uuid B = new Uuid(0x1112131415161718L, 0x191a1b1c1d1e1f20L);

    static String hex(byte[] bytes) {
        StringBuilder hex = new StringBuilder();
        for (byte b : bytes) hex.append(String.format("%02x", b));
        return hex + "\n";
    }

    static void write(Path dir, String name, ApiMessage m, short version) throws Exception {
        byte[] bytes = MessageUtil.byteBufferToArray(MessageUtil.toByteBufferAccessor(m, version).buffer());
        Files.writeString(dir.resolve(name + "-v" + version + ".hex"), hex(bytes));
    }

    static void record(Path dir, String name, byte[] bytes) throws Exception {
        Files.writeString(dir.resolve(name + "-record.hex"), hex(bytes));
    }

    public static void main(String[] args) throws Exception {
        Path dir = Path.of(args[0]);
        shareState(dir);
        streams(dir);
        records(dir);
    }

    static void shareState(Path dir) throws Exception {
        short v0 = 0;
        write(dir, "InitializeShareGroupStateRequest", new InitializeShareGroupStateRequestData()
            .setGroupId("share-g").setTopics(List.of(new InitializeShareGroupStateRequestData.InitializeStateData()
                .setTopicId(A).setPartitions(List.of(
                    new InitializeShareGroupStateRequestData.PartitionData().setPartition(0).setStateEpoch(3).setStartOffset(-1),
                    new InitializeShareGroupStateRequestData.PartitionData().setPartition(4).setStateEpoch(3).setStartOffset(1234))))), v0);
        write(dir, "InitializeShareGroupStateResponse", new InitializeShareGroupStateResponseData()
            .setResults(List.of(new InitializeShareGroupStateResponseData.InitializeStateResult()
                .setTopicId(A).setPartitions(List.of(
                    new InitializeShareGroupStateResponseData.PartitionResult().setPartition(0),
                    new InitializeShareGroupStateResponseData.PartitionResult().setPartition(4)
                        .setErrorCode((short) 124).setErrorMessage("fenced state epoch"))))), v0);

        write(dir, "ReadShareGroupStateRequest", new ReadShareGroupStateRequestData()
            .setGroupId("share-g").setTopics(List.of(new ReadShareGroupStateRequestData.ReadStateData()
                .setTopicId(B).setPartitions(List.of(
                    new ReadShareGroupStateRequestData.PartitionData().setPartition(2).setLeaderEpoch(7))))), v0);
        write(dir, "ReadShareGroupStateResponse", new ReadShareGroupStateResponseData()
            .setResults(List.of(new ReadShareGroupStateResponseData.ReadStateResult()
                .setTopicId(B).setPartitions(List.of(new ReadShareGroupStateResponseData.PartitionResult()
                    .setPartition(2).setStateEpoch(3).setStartOffset(100).setStateBatches(List.of(
                        new ReadShareGroupStateResponseData.StateBatch()
                            .setFirstOffset(100).setLastOffset(109).setDeliveryState((byte) 0).setDeliveryCount((short) 1),
                        new ReadShareGroupStateResponseData.StateBatch()
                            .setFirstOffset(110).setLastOffset(110).setDeliveryState((byte) 4).setDeliveryCount((short) 5))))))), v0);

        for (short v = 0; v <= 1; v++) {
            WriteShareGroupStateRequestData.PartitionData p = new WriteShareGroupStateRequestData.PartitionData()
                .setPartition(2).setStateEpoch(3).setLeaderEpoch(7).setStartOffset(100)
                .setStateBatches(List.of(new WriteShareGroupStateRequestData.StateBatch()
                    .setFirstOffset(100).setLastOffset(149).setDeliveryState((byte) 2).setDeliveryCount((short) 1)));
            if (v >= 1) p.setDeliveryCompleteCount(50);
            write(dir, "WriteShareGroupStateRequest", new WriteShareGroupStateRequestData()
                .setGroupId("share-g").setTopics(List.of(new WriteShareGroupStateRequestData.WriteStateData()
                    .setTopicId(B).setPartitions(List.of(p)))), v);
            write(dir, "WriteShareGroupStateResponse", new WriteShareGroupStateResponseData()
                .setResults(List.of(new WriteShareGroupStateResponseData.WriteStateResult()
                    .setTopicId(B).setPartitions(List.of(new WriteShareGroupStateResponseData.PartitionResult()
                        .setPartition(2).setErrorCode((short) 74).setErrorMessage(null))))), v);

            ReadShareGroupStateSummaryResponseData.PartitionResult r = new ReadShareGroupStateSummaryResponseData.PartitionResult()
                .setPartition(1).setStateEpoch(3).setLeaderEpoch(7).setStartOffset(100);
            if (v >= 1) r.setDeliveryCompleteCount(12);
            write(dir, "ReadShareGroupStateSummaryRequest", new ReadShareGroupStateSummaryRequestData()
                .setGroupId("share-g").setTopics(List.of(new ReadShareGroupStateSummaryRequestData.ReadStateSummaryData()
                    .setTopicId(A).setPartitions(List.of(
                        new ReadShareGroupStateSummaryRequestData.PartitionData().setPartition(1).setLeaderEpoch(7))))), v);
            write(dir, "ReadShareGroupStateSummaryResponse", new ReadShareGroupStateSummaryResponseData()
                .setResults(List.of(new ReadShareGroupStateSummaryResponseData.ReadStateSummaryResult()
                    .setTopicId(A).setPartitions(List.of(r)))), v);
        }

        write(dir, "DeleteShareGroupStateRequest", new DeleteShareGroupStateRequestData()
            .setGroupId("share-g").setTopics(List.of(new DeleteShareGroupStateRequestData.DeleteStateData()
                .setTopicId(A).setPartitions(List.of(
                    new DeleteShareGroupStateRequestData.PartitionData().setPartition(0),
                    new DeleteShareGroupStateRequestData.PartitionData().setPartition(1))))), v0);
        write(dir, "DeleteShareGroupStateResponse", new DeleteShareGroupStateResponseData()
            .setResults(List.of(new DeleteShareGroupStateResponseData.DeleteStateResult()
                .setTopicId(A).setPartitions(List.of(new DeleteShareGroupStateResponseData.PartitionResult()
                    .setPartition(0).setErrorCode((short) 69).setErrorMessage("unknown group"))))), v0);
    }

    static void streams(Path dir) throws Exception {
        for (short v = 0; v <= 1; v++) {
            write(dir, "StreamsGroupHeartbeatRequest", new StreamsGroupHeartbeatRequestData()
                .setGroupId("app").setMemberId("m-1").setMemberEpoch(0).setEndpointInformationEpoch(2)
                .setRackId("rack-a").setRebalanceTimeoutMs(30000)
                .setTopology(new StreamsGroupHeartbeatRequestData.Topology().setEpoch(1).setSubtopologies(List.of(
                    new StreamsGroupHeartbeatRequestData.Subtopology().setSubtopologyId("0")
                        .setSourceTopics(List.of("in")).setRepartitionSinkTopics(List.of("app-rep"))
                        .setStateChangelogTopics(List.of(new StreamsGroupHeartbeatRequestData.TopicInfo()
                            .setName("app-store-changelog").setPartitions(0).setReplicationFactor((short) -1)
                            .setTopicConfigs(List.of(new StreamsGroupHeartbeatRequestData.KeyValue()
                                .setKey("cleanup.policy").setValue("compact")))))
                        .setCopartitionGroups(List.of(new StreamsGroupHeartbeatRequestData.CopartitionGroup()
                            .setSourceTopics(List.of((short) 0)))))))
                .setActiveTasks(List.of(new StreamsGroupHeartbeatRequestData.TaskIds()
                    .setSubtopologyId("0").setPartitions(List.of(0, 1))))
                .setProcessId("p-1")
                .setUserEndpoint(new StreamsGroupHeartbeatRequestData.Endpoint().setHost("h1").setPort(8080))
                .setClientTags(List.of(new StreamsGroupHeartbeatRequestData.KeyValue().setKey("zone").setValue("z1")))
                .setTaskOffsets(List.of(new StreamsGroupHeartbeatRequestData.TaskOffset()
                    .setSubtopologyId("0").setPartition(1).setOffset(42))), v);

            StreamsGroupHeartbeatResponseData r = new StreamsGroupHeartbeatResponseData()
                .setThrottleTimeMs(0).setMemberId("m-1").setMemberEpoch(5).setHeartbeatIntervalMs(5000)
                .setTaskOffsetIntervalMs(60000)
                .setStatus(List.of(new StreamsGroupHeartbeatResponseData.Status()
                    .setStatusCode((byte) (v >= 1 ? 6 : 1)).setStatusDetail("detail")))
                .setActiveTasks(List.of(new StreamsGroupHeartbeatResponseData.TaskIds()
                    .setSubtopologyId("0").setPartitions(List.of(0, 1))))
                .setEndpointInformationEpoch(2)
                .setPartitionsByUserEndpoint(List.of(new StreamsGroupHeartbeatResponseData.EndpointToPartitions()
                    .setUserEndpoint(new StreamsGroupHeartbeatResponseData.Endpoint().setHost("h1").setPort(8080))
                    .setActivePartitions(List.of(new StreamsGroupHeartbeatResponseData.TopicPartition()
                        .setTopic("in").setPartitions(List.of(0, 1))))));
            if (v == 0) r.setAcceptableRecoveryLagLegacy(10000);
            if (v >= 1) r.setAcceptableRecoveryLag(5_000_000_000L).setTopologyDescriptionRequired(true);
            write(dir, "StreamsGroupHeartbeatResponse", r, v);

            StreamsGroupDescribeRequestData d = new StreamsGroupDescribeRequestData()
                .setGroupIds(List.of("app", "other")).setIncludeAuthorizedOperations(true);
            if (v >= 1) d.setIncludeTopologyDescription(true);
            write(dir, "StreamsGroupDescribeRequest", d, v);

            StreamsGroupDescribeResponseData.Assignment assignment = new StreamsGroupDescribeResponseData.Assignment()
                .setActiveTasks(List.of(new StreamsGroupDescribeResponseData.TaskIds()
                    .setSubtopologyId("0").setPartitions(List.of(0))));
            StreamsGroupDescribeResponseData.DescribedGroup g = new StreamsGroupDescribeResponseData.DescribedGroup()
                .setGroupId("app").setGroupState("Stable").setGroupEpoch(5).setAssignmentEpoch(5)
                .setTopology(new StreamsGroupDescribeResponseData.Topology().setEpoch(1).setSubtopologies(List.of(
                    new StreamsGroupDescribeResponseData.Subtopology().setSubtopologyId("0").setSourceTopics(List.of("in")))))
                .setMembers(List.of(new StreamsGroupDescribeResponseData.Member()
                    .setMemberId("m-1").setMemberEpoch(5).setClientId("c").setClientHost("/10.0.0.1")
                    .setTopologyEpoch(1).setProcessId("p-1")
                    .setUserEndpoint(new StreamsGroupDescribeResponseData.Endpoint().setHost("h1").setPort(8080))
                    .setAssignment(assignment).setTargetAssignment(assignment)))
                .setAuthorizedOperations(0x5a8);
            if (v >= 1) {
                StreamsGroupDescribeResponseData.TopologyDescriptionNode source = new StreamsGroupDescribeResponseData.TopologyDescriptionNode()
                    .setName("KSTREAM-SOURCE-0000000000").setNodeType((byte) 0).setSourceTopics(List.of("in"))
                    .setSuccessors(List.of("KSTREAM-SINK-0000000001"));
                StreamsGroupDescribeResponseData.TopologyDescriptionNode sink = new StreamsGroupDescribeResponseData.TopologyDescriptionNode()
                    .setName("KSTREAM-SINK-0000000001").setNodeType((byte) 2).setSinkTopic("out");
                g.setTopologyDescription(new StreamsGroupDescribeResponseData.TopologyDescription()
                    .setSubtopologies(List.of(new StreamsGroupDescribeResponseData.TopologyDescriptionSubtopology()
                        .setSubtopologyId("0").setNodes(List.of(source, sink))))
                    .setGlobalStores(List.of(new StreamsGroupDescribeResponseData.TopologyDescriptionGlobalStore()
                        .setSource(source).setProcessor(sink.duplicate().setStores(List.of("store"))))))
                    .setTopologyDescriptionStatus((byte) 1).setAssignorName("sticky");
            }
            write(dir, "StreamsGroupDescribeResponse", new StreamsGroupDescribeResponseData()
                .setThrottleTimeMs(3).setGroups(List.of(g, new StreamsGroupDescribeResponseData.DescribedGroup()
                    .setErrorCode((short) 69).setErrorMessage("no such group").setGroupId("other").setGroupState("Dead"))), v);
        }
    }

    static void records(Path dir) throws Exception {
        record(dir, "ShareSnapshotKey", MessageUtil.toCoordinatorTypePrefixedBytes(
            new ShareSnapshotKey().setGroupId("share-g").setTopicId(A).setPartition(3)));
        record(dir, "ShareSnapshotValue", MessageUtil.toVersionPrefixedBytes((short) 0, new ShareSnapshotValue()
            .setSnapshotEpoch(2).setStateEpoch(3).setLeaderEpoch(7).setStartOffset(100).setDeliveryCompleteCount(50)
            .setCreateTimestamp(1700000000000L).setWriteTimestamp(1700000005000L)
            .setStateBatches(List.of(new ShareSnapshotValue.StateBatch()
                .setFirstOffset(100).setLastOffset(149).setDeliveryState((byte) 2).setDeliveryCount((short) 1)))));
        record(dir, "ShareUpdateKey", MessageUtil.toCoordinatorTypePrefixedBytes(
            new ShareUpdateKey().setGroupId("share-g").setTopicId(A).setPartition(3)));
        record(dir, "ShareUpdateValue", MessageUtil.toVersionPrefixedBytes((short) 0, new ShareUpdateValue()
            .setSnapshotEpoch(2).setLeaderEpoch(7).setStartOffset(-1)
            .setStateBatches(List.of(new ShareUpdateValue.StateBatch()
                .setFirstOffset(150).setLastOffset(150).setDeliveryState((byte) 0).setDeliveryCount((short) 2)))));
    }
}
