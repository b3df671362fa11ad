#!/usr/bin/env bash
# Plots a sweep CSV written by `encoderd-loadtest --sweep-rates ... --sweep-csv`:
# achieved throughput (x) against p99 and p50 latency (y, log scale).
# usage: plot_sweep.sh SWEEP.csv OUT.png [TITLE]
set -euo pipefail
csv=${1:?usage: plot_sweep.sh SWEEP.csv OUT.png [TITLE]}
png=${2:?usage: plot_sweep.sh SWEEP.csv OUT.png [TITLE]}
title=${3:-encoderd throughput vs latency}
command -v gnuplot >/dev/null || { echo "plot_sweep.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
gnuplot <<GP
set terminal pngcairo size 900,600 noenhanced
set output '${png}'
set datafile separator ','
set key top left autotitle columnhead
set title '${title}'
set xlabel 'achieved throughput (requests/s)'
set ylabel 'latency (ms)'
set logscale y
set grid
plot '${csv}' using 2:8 with linespoints lw 2 pt 7 title 'p99', \
     '${csv}' using 2:6 with linespoints lw 2 pt 5 title 'p50'
GP
echo "wrote ${png}"
