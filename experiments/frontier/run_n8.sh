#!/bin/bash
# The off-policy stability frontier at N = 8, with GRPO and CISPO (experiments/frontier/run_offpolicy.sh 8).
#   bash experiments/frontier/run_n8.sh 0 1 2     # the runs, then the report
#   bash experiments/frontier/run_n8.sh --report  # the report again, from the committed logs alone
exec bash "$(dirname "$0")/run_offpolicy.sh" 8 "$@"
