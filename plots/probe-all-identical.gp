# caption: Per live server (latest run each): the share of requests whose warm run (through the server's cache) gave the same top-K log-probabilities as its forced cold run at every generated position, as float bits (memcmp) and as the JSON text the server sent, without a fork of the greedy continuation; and the share of requests whose reported reuse equals the reuse its cache rule gives (over the requests where both are known). The labels give the counts.
# probe-*-identical: blocks = bit-identical, reuse as expected; columns: 1 variant index, 2 variant, 3 %, 4 "k/n".
set multiplot title sprintf('%s: warm bit-identical to cold, and reuse as expected', exp_name)
stats blocks index 0 using 1 nooutput
ng = int(STATS_max) + 1
set xrange [-0.55:ng - 0.45]
set yrange [0:115]
set ytics 0, 25, 100
set ylabel '% of requests'
set grid noxtics
set xtics scale 0 rotate by 15 right offset 0.5, 0
set bmargin at screen 0.2
set style fill solid 0.85 border -1
plot for [i = 1:nkeys] blocks index (i - 1) using ($1 + baroff(i, nkeys)):3:(barw(nkeys)) with boxes lt i notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using ($1 + baroff(i, nkeys)):($3 + 4):4 with labels font smallfont notitle, \
     blocks index 0 using 1:(NaN):xtic(2) notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with boxes lt i title key(i)
unset multiplot
