package dev.osprey.compat;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A broker started with {@code osprey.transaction.version=1}: it finalizes level 1 of the
 * transaction.version feature and stops EndTxn and TxnOffsetCommit at v4, so
 * kafka-clients 4.4 falls back to the older protocol (its own AddPartitionsToTxn and
 * AddOffsetsToTxn, no epoch bump per transaction) and transactions still work.
 */
@Timeout(90)
class TransactionVersion1Test {
    @RegisterExtension
    static final OspreyBroker BROKER = new OspreyBroker(List.of("osprey.transaction.version=1"));

    @Test
    void transactions_work_and_keep_their_epoch_with_transaction_version_1() throws Exception {
        TransactionRounds.run(BROKER, "tx-tv1", 0);
    }
}
