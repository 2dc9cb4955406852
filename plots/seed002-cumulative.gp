# caption: Cumulative wall time to first token of the reused path (sum of ttft_reuse_ms in replay order, s) against the turn of the agent loop, per variant (quirk = full-reprocess: the policy re-prefills the whole prompt; fixed = restore from a grid checkpoint); grey lines: the cold path of each model family (mean ttft_cold_ms per request over its variants, summed).
# seed002-cumulative: blocks = one per series, the variants first, then one
# "FAMILY cold" per model family; columns: 1 turn, 2 cumulative seconds.
set multiplot title 'seed002: cumulative TTFT of an agent loop, recurrent and hybrid models'
set xlabel 'turn (request number, replay order)'
set ylabel 'cumulative TTFT (s)'
set yrange [0:*]
set xrange [0.5:*]
ncold = 0
do for [i = 1:nkeys] { if (iscold(i)) { ncold = ncold + 1 } }
nvar = nkeys - ncold
plot for [i = 1:nvar] blocks index (i - 1) using 1:2 with linespoints lt i notitle, \
     for [i = nvar + 1:nkeys] blocks index (i - 1) using 1:2 with lines lt 8 lw 2 dt i-nvar+1 notitle
eval legend_setup
plot -1 notitle, for [i = 1:nvar] keyentry with linespoints lt i title key(i), \
     for [i = nvar + 1:nkeys] keyentry with lines lt 8 lw 2 dt i-nvar+1 title key(i)
unset multiplot
