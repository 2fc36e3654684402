// Writes Kafka's own encoding of the controller messages Osprey's codec must match:
// AlterPartition (56), BrokerRegistration (62), BrokerHeartbeat (63) and
// AllocateProducerIds (67), requests and responses, at every version Kafka 4.4 has,
// with the values `tests/controller_golden.rs` builds. One `<Message>-v<N>.hex` per
// message and version, each the body without header. Regenerate with:
//   javac -cp kafka-clients-4.4.0.jar -d /tmp/g GoldenControllerMessages.java
//   java -cp kafka-clients-4.4.0.jar:/tmp/g GoldenControllerMessages .
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.*;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;

public class GoldenControllerMessages {
    static final Uuid A = new Uuid(0x0102030405060708L, 0x090a0b0c0d0e0f10L);
    static final Uuid B = new Uuid(0x1112131415161718L, 0x191a1b1c1d1e1f20L);

    static void write(Path dir, String name, ApiMessage m, short version) throws Exception {
        ObjectSerializationCache cache = new ObjectSerializationCache();
        int size = m.size(cache, version);
        ByteBuffer buf = ByteBuffer.allocate(size);
        m.write(new ByteBufferAccessor(buf), cache, version);
        StringBuilder hex = new StringBuilder();
        for (byte b : buf.array()) hex.append(String.format("%02x", b));
        Files.writeString(dir.resolve(name + "-v" + version + ".hex"), hex + "\n");
    }

    public static void main(String[] args) throws Exception {
        Path dir = Path.of(args[0]);
        for (short v = 2; v <= 3; v++) {
            AlterPartitionRequestData.PartitionData p = new AlterPartitionRequestData.PartitionData()
                .setPartitionIndex(2).setLeaderEpoch(5).setPartitionEpoch(9);
            if (v < 3) p.setNewIsr(List.of(1, 3));
            else p.setNewIsrWithEpochs(List.of(
                new AlterPartitionRequestData.BrokerState().setBrokerId(1).setBrokerEpoch(100),
                new AlterPartitionRequestData.BrokerState().setBrokerId(3).setBrokerEpoch(-1)));
            p.setLeaderRecoveryState((byte) 1);
            AlterPartitionRequestData.TopicData t = new AlterPartitionRequestData.TopicData().setPartitions(List.of(p));
            t.setTopicId(A);
            write(dir, "AlterPartitionRequest", new AlterPartitionRequestData()
                .setBrokerId(1).setBrokerEpoch(100).setTopics(List.of(t)), v);

            AlterPartitionResponseData.PartitionData rp = new AlterPartitionResponseData.PartitionData()
                .setPartitionIndex(2).setErrorCode((short) 107).setLeaderId(1).setLeaderEpoch(5)
                .setIsr(List.of(1, 3)).setPartitionEpoch(10);
            rp.setLeaderRecoveryState((byte) 1);
            AlterPartitionResponseData.TopicData rt = new AlterPartitionResponseData.TopicData().setPartitions(List.of(rp));
            rt.setTopicId(A);
            write(dir, "AlterPartitionResponse", new AlterPartitionResponseData()
                .setThrottleTimeMs(7).setErrorCode((short) 0).setTopics(List.of(rt)), v);
        }
        for (short v = 0; v <= 4; v++) {
            BrokerRegistrationRequestData.ListenerCollection listeners = new BrokerRegistrationRequestData.ListenerCollection();
            listeners.add(new BrokerRegistrationRequestData.Listener()
                .setName("PLAINTEXT").setHost("127.0.0.1").setPort(19092).setSecurityProtocol((short) 0));
            listeners.add(new BrokerRegistrationRequestData.Listener()
                .setName("SSL").setHost("b1.example").setPort(65535).setSecurityProtocol((short) 1));
            BrokerRegistrationRequestData.FeatureCollection features = new BrokerRegistrationRequestData.FeatureCollection();
            features.add(new BrokerRegistrationRequestData.Feature()
                .setName("metadata.version").setMinSupportedVersion((short) 7).setMaxSupportedVersion((short) 27));
            BrokerRegistrationRequestData r = new BrokerRegistrationRequestData()
                .setBrokerId(3).setClusterId("MkU3OEVBNTcwNTJENDM2Qk").setIncarnationId(A)
                .setListeners(listeners).setFeatures(features).setRack(v % 2 == 0 ? "rack-a" : null);
            if (v >= 1) r.setIsMigratingZkBroker(false);
            if (v >= 2) r.setLogDirs(List.of(A, B));
            if (v >= 3) r.setPreviousBrokerEpoch(42);
            write(dir, "BrokerRegistrationRequest", r, v);
            write(dir, "BrokerRegistrationResponse", new BrokerRegistrationResponseData()
                .setThrottleTimeMs(0).setErrorCode((short) 101).setBrokerEpoch(77), v);
        }
        for (short v = 0; v <= 2; v++) {
            BrokerHeartbeatRequestData h = new BrokerHeartbeatRequestData()
                .setBrokerId(3).setBrokerEpoch(77).setCurrentMetadataOffset(1234).setWantFence(false).setWantShutDown(true);
            if (v >= 1) h.setOfflineLogDirs(List.of(B));
            if (v >= 2) h.setCordonedLogDirs(List.of(A, B));
            write(dir, "BrokerHeartbeatRequest", h, v);
            write(dir, "BrokerHeartbeatResponse", new BrokerHeartbeatResponseData()
                .setThrottleTimeMs(1).setErrorCode((short) 0).setIsCaughtUp(true).setIsFenced(false).setShouldShutDown(true), v);
        }
        write(dir, "AllocateProducerIdsRequest", new AllocateProducerIdsRequestData().setBrokerId(3).setBrokerEpoch(77), (short) 0);
        write(dir, "AllocateProducerIdsResponse", new AllocateProducerIdsResponseData()
            .setThrottleTimeMs(0).setErrorCode((short) 0).setProducerIdStart(5000).setProducerIdLen(1000), (short) 0);
    }
}
