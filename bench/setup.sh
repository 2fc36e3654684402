# Sourced by bench/run.sh, bench/release.sh and bench/latency.sh (with `here` set to bench/): fetches
# the Kafka broker and tools into $kafka_lib and makes the venv $venv, each again only
# when bench/pom.xml or bench/requirements.txt changed. need_kafka=0 skips Kafka.

# Every jar of the broker and the tools in one directory: the classpath of both.
kafka_lib="$here/scratch/kafka-lib"
stamp="$kafka_lib/.pom.sha256"
want="$(sha256sum "$here/pom.xml" | cut -d' ' -f1)"
if [[ "${need_kafka:-1}" != 0 && ( ! -f "$stamp" || "$(cat "$stamp")" != "$want" ) ]]; then
    rm -rf "$kafka_lib"
    (cd "$here" && mvn -B -q --no-transfer-progress dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$kafka_lib")
    echo "$want" > "$stamp"
fi

venv="$here/scratch/venv"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    echo "$want" > "$stamp"
fi
