#!/bin/bash
# Long GPU jobs across calls that each end within a time limit (the lent GPU machine's 10 minutes): a job
# started here runs in its own session, so it outlives the call that started it, and a later call waits
# for it. Output goes to $DETACHED_DIR/NAME.log (default /tmp/detached), the exit code to NAME.rc.
#   bash docs/long/detached.sh start NAME COMMAND...    # returns at once
#   bash docs/long/detached.sh wait SECONDS NAME...     # until every NAME has ended or SECONDS have passed;
#                                                       # prints each one's state and last log line, exits 0
#                                                       # only if all ended with code 0
set -euo pipefail
dir=${DETACHED_DIR:-/tmp/detached}
mkdir -p "$dir"
ended() { for n in "$@"; do [ -f "$dir/$n.rc" ] || return 1; done; }
case "${1:-}" in
  start)
    name=$2
    shift 2
    rm -f "$dir/$name.rc"
    # setsid: a new session, which the machine's end-of-call cleanup leaves running
    setsid bash -c '"$@" > "$0.log" 2>&1; echo $? > "$0.rc"' "$dir/$name" "$@" < /dev/null > /dev/null 2>&1 &
    echo "started $name (log $dir/$name.log)"
    ;;
  wait)
    deadline=$((SECONDS + $2))
    shift 2
    until ended "$@" || [ $SECONDS -ge $deadline ]; do sleep 1; done
    status=0
    for n in "$@"; do
      if [ -f "$dir/$n.rc" ]; then state="ended, code $(cat "$dir/$n.rc")"; else state="running"; fi
      [ "$state" = "ended, code 0" ] || status=1
      echo "$n: $state: $(tail -n 1 "$dir/$n.log" 2> /dev/null | cut -c1-200)"
    done
    exit $status
    ;;
  *)
    echo "usage: $0 start NAME COMMAND... | wait SECONDS NAME..." >&2
    exit 2
    ;;
esac
