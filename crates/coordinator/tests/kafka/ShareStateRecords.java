import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.share.ShareCoordinatorRecordSerde;
import org.apache.kafka.coordinator.share.generated.*;
import org.apache.kafka.server.common.ApiMessageAndVersion;
import java.util.HexFormat;
import java.util.List;

/** Prints Kafka's bytes for the records osprey's share_state test compares with. */
public class ShareStateRecords {
    public static void main(String[] args) {
        Uuid topic = new Uuid(0x0707070707070707L, 0x0707070707070707L);
        ShareCoordinatorRecordSerde serde = new ShareCoordinatorRecordSerde();
        CoordinatorRecord snapshot = CoordinatorRecord.record(
            new ShareSnapshotKey().setGroupId("queue").setTopicId(topic).setPartition(2),
            new ApiMessageAndVersion(new ShareSnapshotValue().setSnapshotEpoch(3).setStateEpoch(1).setLeaderEpoch(7)
                .setStartOffset(100).setDeliveryCompleteCount(4).setCreateTimestamp(1700000000000L).setWriteTimestamp(1700000000500L)
                .setStateBatches(List.of(
                    new ShareSnapshotValue.StateBatch().setFirstOffset(100).setLastOffset(104).setDeliveryState((byte) 2).setDeliveryCount((short) 1),
                    new ShareSnapshotValue.StateBatch().setFirstOffset(105).setLastOffset(105).setDeliveryState((byte) 4).setDeliveryCount((short) 5))),
                (short) 0));
        CoordinatorRecord update = CoordinatorRecord.record(
            new ShareUpdateKey().setGroupId("queue").setTopicId(topic).setPartition(2),
            new ApiMessageAndVersion(new ShareUpdateValue().setSnapshotEpoch(3).setLeaderEpoch(-1).setStartOffset(-1)
                .setStateBatches(List.of(
                    new ShareUpdateValue.StateBatch().setFirstOffset(106).setLastOffset(110).setDeliveryState((byte) 0).setDeliveryCount((short) 2))),
                (short) 0));
        HexFormat hex = HexFormat.of();
        for (CoordinatorRecord r : List.of(snapshot, update)) {
            System.out.println(hex.formatHex(serde.serializeKey(r)) + " " + hex.formatHex(serde.serializeValue(r)));
        }
    }
}
