# caption: vLLM #40696 on a hybrid model: the reuse fraction of follow-up questions on one static context against the prompt length, with the attention block raised to cover a Mamba state page (quirk hybrid-block-size, 1088 tokens here: dashed line) and with the 64-token block (fixed); only full blocks are cached, so prompts shorter than the raised block never hit.
# quirks-vllm40696: blocks = one per variant; columns: 1 mean prompt tokens,
# 2 follow-up reuse fraction, 3 block size.
set multiplot title 'vLLM #40696: hybrid blocks raised to the Mamba page size'
stats blocks index 0 using 3 nooutput
bq = STATS_max
set xlabel 'prompt tokens (mean per run)'
set ylabel 'reuse fraction, follow-up requests'
set yrange [-0.02:1.02]
set ytics 0, 0.2, 1
set xrange [0:*]
set arrow 1 from bq, graph 0 to bq, graph 1 nohead dt 2 lc rgb grey lw 1.5
set label 1 sprintf('raised block: %d tokens', bq) at bq, graph 0.45 left offset 0.6, 0 font smallfont
plot for [i = 1:nkeys] blocks index (i - 1) using 1:2 with linespoints lt i notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with linespoints lt i title key(i)
unset multiplot
