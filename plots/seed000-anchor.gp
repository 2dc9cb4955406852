# caption: Time spent writing disk anchor checkpoints in each fresh agent session, summed over its requests (requests.anchor_ms, or $.anchor_ms of requests.extra; 0 when no anchor was written), per variant; labels give the per-session total (ms).
# seed000-anchor: blocks = one per variant; columns: 1 session number,
# 2 anchor write ms, 3 anchors written.
set multiplot title 'seed000: anchor write time per fresh session'
set xlabel 'fresh session number'
set ylabel 'anchor write time (ms)'
set yrange [0:*]
set offsets 0, 0, graph 0.1, 0
set xtics 1
set grid noxtics
set style fill solid 0.85 border -1
stats data using 2 nooutput
set xrange [STATS_min - 0.6:STATS_max + 0.6]
bw = barw(nkeys)
plot for [i = 1:nkeys] blocks index (i - 1) using ($1 + baroff(i, nkeys)):2:(bw * 0.95) with boxes lt i notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using ($1 + baroff(i, nkeys)):2:($2 > 0 ? sprintf("%.1f", $2) : "") \
         with labels offset 0, 0.7 font smallfont notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with boxes lt i title key(i)
unset multiplot
