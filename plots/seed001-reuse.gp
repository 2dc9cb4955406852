# caption: Reuse fraction (tokens whose state came from the cache / prompt tokens) of every request of the replayed transcript, in replay order, without normalization (raw) and with the volatile cch= billing checksum normalized before tokenization.
# seed001-reuse: blocks = one per variant; columns: 1 request number, 2 reuse fraction.
set multiplot title 'seed001: prefix reuse with a volatile billing checksum in the prompt'
set xlabel 'request number (replay order)'
set ylabel 'reuse fraction (reused / prompt)'
set yrange [-0.02:1.02]
set ytics 0, 0.2, 1
set format y '%.1f'
set xrange [0.5:*]
plot for [i = 1:nkeys] blocks index (i - 1) using 1:2 with linespoints lt i notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with linespoints lt i title key(i)
unset multiplot
