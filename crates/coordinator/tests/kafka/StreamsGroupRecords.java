import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;
import org.apache.kafka.coordinator.group.generated.StreamsGroupMemberMetadataValue;
import org.apache.kafka.coordinator.group.generated.StreamsGroupTopologyValue;
import org.apache.kafka.coordinator.group.streams.MemberState;
import org.apache.kafka.coordinator.group.streams.StreamsCoordinatorRecordHelpers;
import org.apache.kafka.coordinator.group.streams.StreamsGroupMember;
import org.apache.kafka.coordinator.group.streams.TasksTuple;
import org.apache.kafka.coordinator.group.streams.TasksTupleWithEpochs;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Prints, one "key value" hex pair a line (value "-" for a tombstone), the records Kafka
 * 4.4's own StreamsCoordinatorRecordHelpers write for the streams group that osprey's
 * streams_group_records test builds: tests/streams_group_records.rs holds the output.
 *   javac -cp "<kafka 4.4 libs>/*" StreamsGroupRecords.java && java -cp "<libs>/*:." StreamsGroupRecords
 */
public class StreamsGroupRecords {
    public static void main(String[] args) {
        String group = "word-count";
        StreamsGroupTopologyValue.TopicInfo changelog = new StreamsGroupTopologyValue.TopicInfo()
            .setName("word-count-counts-changelog")
            .setTopicConfigs(List.of(new StreamsGroupTopologyValue.TopicConfig().setKey("cleanup.policy").setValue("compact")));
        StreamsGroupTopologyValue.TopicInfo repartition = new StreamsGroupTopologyValue.TopicInfo()
            .setName("word-count-counts-repartition").setReplicationFactor((short) 3);
        StreamsGroupTopologyValue topology = new StreamsGroupTopologyValue().setEpoch(2).setSubtopologies(List.of(
            new StreamsGroupTopologyValue.Subtopology().setSubtopologyId("0")
                .setSourceTopics(List.of("words"))
                .setRepartitionSinkTopics(List.of("word-count-counts-repartition")),
            new StreamsGroupTopologyValue.Subtopology().setSubtopologyId("1")
                .setRepartitionSourceTopics(List.of(repartition))
                .setStateChangelogTopics(List.of(changelog))
                .setCopartitionGroups(List.of(new StreamsGroupTopologyValue.CopartitionGroup()
                    .setRepartitionSourceTopics(List.of((short) 0))))));
        StreamsGroupMember m1 = new StreamsGroupMember.Builder("m1")
            .setMemberEpoch(5).setPreviousMemberEpoch(4).setState(MemberState.STABLE)
            .setInstanceId("i1").setRackId("r1").setClientId("c1").setClientHost("/10.0.0.1")
            .setRebalanceTimeoutMs(300000).setTopologyEpoch(2).setProcessId("p1")
            .setUserEndpoint(new StreamsGroupMemberMetadataValue.Endpoint().setHost("host1").setPort(8080))
            .setClientTags(Map.of("zone", "a", "rack", "r1"))
            .setAssignedTasks(new TasksTupleWithEpochs(Map.of("0", Map.of(0, 5, 1, 3)), Map.of("1", Set.of(0)), Map.of()))
            .setTasksPendingRevocation(TasksTupleWithEpochs.EMPTY)
            .build();
        StreamsGroupMember m2 = new StreamsGroupMember.Builder("m2")
            .setMemberEpoch(4).setPreviousMemberEpoch(3).setState(MemberState.UNREVOKED_TASKS)
            .setInstanceId(null).setRackId(null).setClientId("c2").setClientHost("/10.0.0.2")
            .setRebalanceTimeoutMs(300000).setTopologyEpoch(2).setProcessId("p2")
            .setUserEndpoint(null).setClientTags(Map.of())
            .setAssignedTasks(new TasksTupleWithEpochs(Map.of("1", Map.of(0, 4)), Map.of(), Map.of()))
            .setTasksPendingRevocation(new TasksTupleWithEpochs(Map.of("1", Map.of(1, 4)), Map.of(), Map.of()))
            .build();
        List<CoordinatorRecord> records = List.of(
            StreamsCoordinatorRecordHelpers.newStreamsGroupMetadataRecord(group, 5, 0x0102030405060708L, 2,
                Map.of("num.standby.replicas", "1"), 2, -1),
            StreamsCoordinatorRecordHelpers.newStreamsGroupTopologyRecord(group, topology),
            StreamsCoordinatorRecordHelpers.newStreamsGroupMemberRecord(group, m1),
            StreamsCoordinatorRecordHelpers.newStreamsGroupMemberRecord(group, m2),
            StreamsCoordinatorRecordHelpers.newStreamsGroupTargetAssignmentRecord(group, "m1",
                new TasksTuple(Map.of("0", Set.of(0, 1)), Map.of("1", Set.of(0)), Map.of())),
            StreamsCoordinatorRecordHelpers.newStreamsGroupTargetAssignmentRecord(group, "m2",
                new TasksTuple(Map.of("1", Set.of(0, 1)), Map.of(), Map.of())),
            StreamsCoordinatorRecordHelpers.newStreamsGroupTargetAssignmentMetadataRecord(group, 5, 1700000000000L),
            StreamsCoordinatorRecordHelpers.newStreamsGroupCurrentAssignmentRecord(group, m1),
            StreamsCoordinatorRecordHelpers.newStreamsGroupCurrentAssignmentRecord(group, m2),
            StreamsCoordinatorRecordHelpers.newStreamsGroupCurrentAssignmentTombstoneRecord(group, "m2"),
            StreamsCoordinatorRecordHelpers.newStreamsGroupTargetAssignmentTombstoneRecord(group, "m2"),
            StreamsCoordinatorRecordHelpers.newStreamsGroupMemberTombstoneRecord(group, "m2"));
        GroupCoordinatorRecordSerde serde = new GroupCoordinatorRecordSerde();
        HexFormat hex = HexFormat.of();
        for (CoordinatorRecord r : records) {
            byte[] value = serde.serializeValue(r);
            System.out.println(hex.formatHex(serde.serializeKey(r)) + " " + (value == null ? "-" : hex.formatHex(value)));
        }
    }
}
