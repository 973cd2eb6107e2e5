#!/usr/bin/env bash
# Poll a detached docs/perf/device_session.sh from a device command, and hand back everything
# it has written so far as ONE file: $OUT/sess.tgz (the device tool leaves out folders nested
# too deep, and a machine released between two calls takes $S with it, so every poll must
# bring the whole of $S back, the tuning table and the results included).
#
#   device: bash docs/perf/device_poll.sh [WAIT_S]     # default 540: inside a 600 s command
#   here:   tar xzf <files_at>/sess.tgz -C /tmp/sess
#
# Waits until the session's driver (pid in $S.pid, written by the launch command:
# `setsid bash docs/perf/device_session.sh & echo $! >"$S.pid"`) exits or WAIT_S pass, then
# packs $S and prints the driver log's tail and the step it is on.
#
# The machine goes back 30 s after a call ends (`status`: idle_release_s), taking $S and the
# session with it: poll in the very next call (2026-12-03 #4 lost a test run between calls).
set -u
S="${S:-/tmp/sess}"
WAIT_S="${1:-540}"
pid=$(cat "$S.pid" 2>/dev/null) || { echo "[poll] no $S.pid: the machine was released, or the session never started" >&2; exit 2; }
pack() {  # via a temporary name: a command cut mid-pack still returns the previous pack
  tar czf "${OUT:?OUT: the device tool sets it}/sess.tgz.part" -C "$S" . &&
    mv "$OUT/sess.tgz.part" "$OUT/sess.tgz"
}
# Packed every PACK_S seconds while waiting too: the device tool cuts a command at the
# budget's limit (less than WAIT_S when little is left) and returns what $OUT holds then.
last=$SECONDS
while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$WAIT_S" ]; do
  sleep 5
  if [ $((SECONDS - last)) -ge "${PACK_S:-60}" ]; then pack; last=$SECONDS; fi
done
kill -0 "$pid" 2>/dev/null && state=running || state=finished
pack
tail -n "${TAIL:-12}" "$S/driver.log"
echo "[poll] session $state, step $(cat "$S/step" 2>/dev/null), $(du -sh "$OUT/sess.tgz" | cut -f1) packed"
