# caption: Tokens prefilled by the first request of each fresh agent session (sessions numbered in replay order), with the anchor-cold-only quirk (the disk anchor is written only by a prefill that starts from zero) and fixed (a partial hit below the anchor writes a new anchor); grey dashed: the prompt length.
# seed000-prefilled: blocks = one per variant; columns: 1 session number,
# 2 prefilled tokens, 3 prompt tokens.
set multiplot title 'seed000: tokens prefilled per fresh session (disk anchor refresh)'
set xlabel 'fresh session number'
set ylabel 'prefilled tokens'
set yrange [0:*]
set xrange [0.5:*]
set xtics 1
plot blocks index 0 using 1:3 with lines lc rgb grey dt 2 lw 1.2 notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using 1:2 with linespoints lt i notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with linespoints lt i title key(i), \
     keyentry with lines lc rgb grey dt 2 lw 1.2 title 'prompt length'
unset multiplot
