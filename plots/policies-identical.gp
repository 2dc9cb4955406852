# caption: Per workload, the share of requests whose reused run is bit-identical to cold (the last prompt token's logits, every decode step's logits and the state left, under memcmp) for each policy, with the prefill grid (--align chunk, left) and with llama.cpp-style ubatches from the reuse point (--align none, right; disk-anchor needs the grid). Cold reuses nothing, so it is identical by construction.
# policies-identical: blocks = one per policy; columns: 1 workload index,
# 2 workload, 3 alignment (0 chunk, 1 none), 4 % bit-identical, 5 reuse fraction.
set multiplot title 'policies: bit-identical to cold, --align chunk against --align none'
stats blocks index 0 using 1 nooutput
ng = int(STATS_max) + 1
set xrange [-0.55:ng - 0.45]
set yrange [0:105]
set ytics 0, 25, 100
set grid noxtics
set xtics scale 0 rotate by 25 right offset 0.5, 0
set bmargin at screen 0.22
set tmargin at screen 0.74
set style fill solid 0.85 border -1
panel_l = 0.11
panel_gap = 0.08
do for [a = 0:1] {
    eval panel(a + 1, 2)
    set title (a == 0 ? '--align chunk' : '--align none') offset 0, -0.6
    set ylabel (a == 0 ? '% of requests bit-identical' : '')
    plot for [i = 1:nkeys] blocks index (i - 1) using ($3 == a ? $1 + baroff(i, nkeys) : NaN):4:(barw(nkeys)) \
             with boxes lt i notitle, \
         blocks index 0 using 1:(NaN):xtic(2) notitle
}
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with boxes lt i title key(i)
unset multiplot
