# Helpers shared by the load benchmarks (bench/load, bench/tiers, bench/strict): sourced, never run.
# They expect, from the sourcing script: WORK (a temp dir) for children_secs, TICKS
# (getconf CLK_TCK) and QUIET_WAIT for wait_quiet, MYSQL (the client binary) for sql.
# QUIET_SAMPLE (default 1) is the length of one CPU sample of wait_quiet, in seconds.

die() { printf '\n%s: ERROR: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }
say() { printf '\n== %s\n' "$*"; }
sql() { "$MYSQL" -uroot -h127.0.0.1 -P3306 --batch --skip-column-names "$@"; }

# CPU ticks (user + system) of one process, and of the whole machine.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
machine_ticks() { awk '/^cpu /{print $2+$3+$4; exit}' /proc/stat; }

# CHILD_SECS: CPU seconds used so far by this shell's finished children.
children_secs() {
    times >"$WORK/times.txt"
    CHILD_SECS=$(tail -n1 "$WORK/times.txt" | awk '{ t=0; for (i=1;i<=2;i++) { split($i, a, "m"); sub("s","",a[2]); t += a[1]*60 + a[2] } printf "%.2f", t }')
}

# Waits (up to QUIET_WAIT s) until other processes use under a quarter of a core; $1 names
# the measurement in the messages.
wait_quiet() {
    local waited=0 busy sample=${QUIET_SAMPLE:-1}
    while :; do
        local m0; m0=$(machine_ticks); sleep "$sample"
        busy=$(awk -v a="$m0" -v b="$(machine_ticks)" -v t="$TICKS" -v s="$sample" 'BEGIN{printf "%.2f", (b-a)/t/s}')
        if awk -v b="$busy" 'BEGIN{exit !(b < 0.25)}'; then
            echo "   machine quiet before $1 (${busy} cores busy)"; return
        fi
        if ((waited >= QUIET_WAIT)); then
            echo "   WARNING: $busy cores busy with other processes before $1 (waited ${waited}s); numbers may be low"
            return
        fi
        ((waited == 0)) && echo "   machine busy before $1 ($busy cores used by other processes): waiting up to ${QUIET_WAIT}s"
        waited=$((waited + sample))
    done
}

# The value of KEY=VALUE in the text on stdin.
kv() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" | head -n1; }

# A cores-used-by-others figure, starred when above 0.1 (the row is not clean).
mark() { awk -v o="$1" 'BEGIN{ printf "%s%s", o, (o>0.1 ? "*" : " ") }'; }

# Writes $WORK/report.lua: a wrk script whose summary is one line
# `WRK requests=N duration_us=N p50_us=N p99_us=N errors=N`.
write_wrk_report() {
    cat >"$WORK/report.lua" <<'EOF'
done = function(summary, latency, requests)
  io.write(string.format("WRK requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout))
end
EOF
}

# wrk_measure NAME URL: a WARMUP-second wrk run, a wait for a quiet machine, then the measured
# DURATION-second run (THREADS threads, CONNS connections) of GET URL, its output kept in
# $WORK/NAME.wrk. Sets R_RPS (requests/s), R_P50 and R_P99 (ms) and R_ERR. Needs
# write_wrk_report first.
wrk_measure() {
    local name=$1 url=$2 line
    echo "-- $name: warm-up ${WARMUP}s, then wrk -t$THREADS -c$CONNS -d${DURATION}s $url"
    wrk -t"$THREADS" -c"$CONNS" -d"${WARMUP}s" "$url" >/dev/null
    wait_quiet "$name"
    wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" -s "$WORK/report.lua" "$url" >"$WORK/$name.wrk"
    line=" $(grep '^WRK ' "$WORK/$name.wrk")"
    R_RPS=$(awk -v r="$(echo "$line" | kv requests)" -v d="$(echo "$line" | kv duration_us)" 'BEGIN{printf "%.0f", r/(d/1e6)}')
    R_P50=$(awk -v p="$(echo "$line" | kv p50_us)" 'BEGIN{printf "%.3f", p/1000}')
    R_P99=$(awk -v p="$(echo "$line" | kv p99_us)" 'BEGIN{printf "%.3f", p/1000}')
    R_ERR=$(echo "$line" | kv errors)
}
