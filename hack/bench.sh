#!/usr/bin/env bash
# Runs lull's benchmarks; each prints its ratio against the baseline measured
# in the same run. Figures are recorded in docs/performance.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
echo "== window engine (internal/window)"
go test -run '^$' -bench . -benchmem -count "${COUNT:-1}" ./internal/window/
echo "== forecast at scale (internal/forecast: 5,000 nodes, 10,000 windows)"
go test -run '^$' -bench Scale -benchmem -count "${COUNT:-1}" ./internal/forecast/
echo "== window engine vs rrule-go (test/perf/rrulecmp, a separate module)"
(cd test/perf/rrulecmp && go test -run TestSameAnswers -bench . -count "${COUNT:-1}" ./...)
