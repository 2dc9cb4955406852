# caption: Cumulative wall time to first token of the reused path (sum of ttft_reuse_ms in replay order, s) against the turn of the agent loop, per variant on the synthetic recurrent and hybrid models (quirk = full-reprocess: the policy re-prefills the whole prompt; fixed = restore from a grid checkpoint); grey lines: the cold path of each model family (mean ttft_cold_ms per request over its variants, summed).
# seed002-cumulative: blocks = one per series, the variants first, then one
# "FAMILY cold" per model family; columns: 1 turn, 2 cumulative seconds.
set multiplot title 'seed002: cumulative TTFT of an agent loop, recurrent and hybrid models'
set xlabel 'turn (request number, replay order)'
set ylabel 'cumulative TTFT (s)'
set yrange [0:*]
set xrange [0.5:*]
eval cumulative_plot
unset multiplot
