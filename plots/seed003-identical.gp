# caption: Per variant (MODEL/ALIGN/PRECISION/KERNEL), the share of requests whose reused run is bit-identical to cold (last prompt token's logits and every decode step's logits equal under memcmp) and the share of greedy generations whose tokens fork from cold; one panel per model.
# seed003-identical: blocks = one per model; columns: 1 label, 2 % bit-identical,
# 3 % forked, 4 requests. Horizontal bars, variants top to bottom.
set multiplot title 'seed003: bit-exact prefix reuse per variant (align / precision / kernel)'
panel_l = 0.255
panel_r = 0.965
panel_gap = 0.255
set tmargin at screen 0.76
set xrange [0:100]
set xtics 0, 20, 100
set xlabel '% of requests'
set grid noytics
set ytics scale 0
do for [i = 1:nkeys] {
    eval panel(i, nkeys)
    set autoscale y
    stats blocks index (i - 1) using 2 nooutput
    set yrange [-STATS_records + 0.45:0.55]
    set title 'model: '.key(i) offset 0, -0.2
    plot blocks index (i - 1) using (0.5 * $2):(-$0 + 0.19):(0.5 * $2):(0.17):ytic(1) \
             with boxxyerror lt 1 notitle, \
         ''     index (i - 1) using (0.5 * $3):(-$0 - 0.19):(0.5 * $3):(0.17) \
             with boxxyerror lt 2 notitle
}
eval legend_setup
plot -1 notitle, keyentry with boxes lt 1 title 'bit-identical to cold', \
     keyentry with boxes lt 2 title 'greedy generation forks'
unset multiplot
