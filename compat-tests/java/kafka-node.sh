#!/bin/bash
# One Apache Kafka 4.4 node (broker and controller) to prove a Java compat test against
# Kafka itself, e.g. StreamsGroupProtocolTest:
#
#   compat-tests/java/kafka-node.sh fresh /tmp/kafka-node      # formatted anew, started
#   cd compat-tests/java && mvn -B -o test -Dtest=StreamsGroupProtocolTest -Dosprey.bin=... \
#       -Dcompat.kafka.bootstrap=127.0.0.1:19092 \
#       -Dcompat.kafka.restart="$PWD/kafka-node.sh restart /tmp/kafka-node"
#   compat-tests/java/kafka-node.sh stop /tmp/kafka-node
#
# `restart` kills the node with SIGKILL and starts it again on its directory; `fresh` and
# `restart` return once its broker port accepts connections. The jars are $KAFKA_LIB
# (default bench/scratch/kafka-lib, which bench/setup.sh fills); the ports $KAFKA_PORT
# (default 19092) and the next one for the controller. Formatted with
# --feature streams.version=1 (a new Kafka 4.4 cluster's level too).
set -euo pipefail
cmd=${1:?usage: kafka-node.sh fresh|restart|stop DIR}
dir=${2:?usage: kafka-node.sh fresh|restart|stop DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=${KAFKA_LIB:-$root/bench/scratch/kafka-lib}
port=${KAFKA_PORT:-19092}
controller=$((port + 1))

kill_node() {
    if [ -f "$dir/kafka.pid" ]; then
        local pid
        pid=$(cat "$dir/kafka.pid")
        kill -9 "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
        rm -f "$dir/kafka.pid"
    fi
}

start_node() {
    echo "===== start $(date)" >>"$dir/kafka.log"
    java -Xmx768m -Xms768m -XX:+UseG1GC -cp "$lib/*" kafka.Kafka "$dir/server.properties" >>"$dir/kafka.log" 2>&1 &
    echo $! >"$dir/kafka.pid"
    for _ in $(seq 1 240); do
        if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            sleep 1
            return 0
        fi
        sleep 0.5
    done
    echo "kafka did not open port $port within 2 minutes; see $dir/kafka.log" >&2
    return 1
}

case $cmd in
fresh)
    kill_node
    rm -rf "$dir"
    mkdir -p "$dir"
    cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
EOF
    cluster_id=$(java -cp "$lib/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
    java -cp "$lib/*" kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" \
        --feature streams.version=1 >"$dir/format.log" 2>&1
    start_node
    ;;
restart)
    kill_node
    start_node
    ;;
stop)
    kill_node
    ;;
*)
    echo "usage: kafka-node.sh fresh|restart|stop DIR" >&2
    exit 2
    ;;
esac
