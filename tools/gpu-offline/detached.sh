#!/bin/bash
# Long GPU jobs that must outlive the shell that started them: a job started here runs in its own session, so
# it runs on after its starter ends, and a later shell waits for it. Output goes to $DETACHED_DIR/NAME.log
# (default /tmp/detached), the exit code to NAME.rc, the job's process id to NAME.pid. The job lives only as long
# as the machine: a fresh machine has no job. Jobs run in a copy of the working directory, $DETACHED_TREE
# (default $DETACHED_DIR/tree), made by the first start on the machine (without .gpu and .nox) and shared by
# later jobs (a wave finds the cold start's model there): a job importing from a checkout while it is being
# replaced fails (stable_rl.rl found as an empty namespace package). DETACHED_TREE=. runs in place; removing
# the tree makes the next start copy again. Read results from `cd "$(bash tools/gpu-offline/detached.sh tree)"`.
#   bash tools/gpu-offline/detached.sh start NAME COMMAND...    # returns once the job runs in its own session
#   bash tools/gpu-offline/detached.sh wait SECONDS NAME...     # until every NAME has ended or SECONDS have passed;
#                                                       # prints each one's state and last log line, exits 0
#                                                       # only if all ended with code 0, 1 if one failed, was
#                                                       # lost or is unknown here, 3 if none failed but one runs
#   bash tools/gpu-offline/detached.sh tree                     # the folder the jobs run in
set -euo pipefail
dir=${DETACHED_DIR:-/tmp/detached}
mkdir -p "$dir" && dir=$(cd "$dir" && pwd)  # absolute: a job starts in the tree
usage() { echo "usage: $0 start NAME COMMAND... | wait SECONDS NAME... | tree" >&2 && exit 2; }
tree=${DETACHED_TREE:-$dir/tree}
copy_tree() {  # once per machine; an interrupted copy (its first marker left) is made again, nothing else removed
  [ "$tree" = . ] || [ -f "$tree/.detached-copy" ] && return 0
  case "$tree/" in "$PWD"/*) echo "DETACHED_TREE $tree: inside the directory it copies; choose one outside" >&2 && exit 2 ;; esac
  if [ -e "$tree" ] && [ ! -f "$tree/.detached-copying" ] && [ -n "$(ls -A "$tree")" ]; then
    echo "DETACHED_TREE $tree: a folder this script did not copy; choose another, or remove it" >&2 && exit 2
  fi
  rm -rf "$tree" && mkdir -p "$tree" && touch "$tree/.detached-copying"
  tar -C . --exclude=./.gpu --exclude=./.nox -cf - . | tar -C "$tree" -xf -
  mv "$tree/.detached-copying" "$tree/.detached-copy"
}
alive() {  # the job's wrapper runs (a zombie, which a container's init may never reap, does not)
  local pid
  pid=$(cat "$dir/$1.pid" 2> /dev/null) && kill -0 "$pid" 2> /dev/null \
    && [ "$(sed 's/.*) //' "/proc/$pid/stat" 2> /dev/null | cut -d' ' -f1)" != Z ]
}
# ended: an exit code, or no process left to write one (killed with the wrapper, or never started here)
ended() { for n in "$@"; do [ -f "$dir/$n.rc" ] || ! alive "$n" || return 1; done; }
case "${1:-}" in
  start)
    [ $# -ge 3 ] || usage
    name=$2
    shift 2
    case $name in */* | .* | "") echo "NAME '$name': a plain file name, please" >&2 && exit 2 ;; esac
    if alive "$name" && [ ! -f "$dir/$name.rc" ]; then
      echo "$name is still running (pid $(cat "$dir/$name.pid")): wait for it, or choose another NAME" >&2
      exit 1
    fi
    rm -f "$dir/$name.rc" "$dir/$name.pid" "$dir/$name.log"
    copy_tree
    cd "$tree"
    # setsid: a new session, which killing the starter's session leaves running; the pid file is written
    # from inside it, so once it exists the job no longer belongs to the starter's session. The exit code is
    # written whole (a temporary file renamed), so a wait never reads it half-written.
    setsid bash -c 'echo $$ > "$0.pid"; "$@" > "$0.log" 2>&1; echo $? > "$0.rc.tmp"; mv "$0.rc.tmp" "$0.rc"' \
      "$dir/$name" "$@" < /dev/null > /dev/null 2>&1 &
    for _ in $(seq 100); do [ -s "$dir/$name.pid" ] && break; sleep 0.1; done
    [ -s "$dir/$name.pid" ] || { echo "$name did not start" >&2 && exit 1; }
    echo "started $name (pid $(cat "$dir/$name.pid"), log $dir/$name.log)"
    ;;
  wait)
    [ $# -ge 3 ] && [[ $2 =~ ^[0-9]+$ ]] || usage
    deadline=$((SECONDS + $2))
    shift 2
    until ended "$@" || [ $SECONDS -ge $deadline ]; do sleep 1; done
    status=0
    for n in "$@"; do
      if [ -f "$dir/$n.rc" ]; then
        state="ended, code $(cat "$dir/$n.rc")"
        [ "$state" = "ended, code 0" ] || status=1
      elif alive "$n"; then
        state="running"
        [ $status = 1 ] || status=3
      elif [ -f "$dir/$n.pid" ]; then
        state="lost: ended without an exit code (killed)" status=1
      else
        state="unknown: never started on this machine (a fresh machine?)" status=1
      fi
      echo "$n: $state: $(tail -n 1 "$dir/$n.log" 2> /dev/null | cut -c1-200)"
    done
    exit $status
    ;;
  tree) [ "$tree" = . ] && pwd || echo "$tree" ;;
  *) usage ;;
esac
