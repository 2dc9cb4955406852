# caption: Cumulative distribution of TTFT (queue wait, restore and prefill, modeled at the llama3-70b-a800x8 profile) over the 12,031 requests of the conversation trace, for the local and global pools on 10 instances and the three routers on 8; log x.
# traces-ttft: blocks = one per variant; columns: 1 TTFT (s), 2 fraction.
set multiplot title 'traces: TTFT distribution (modeled, Mooncake conversation trace)'
set logscale x 10
set xlabel 'TTFT (s, log)'
set ylabel 'fraction of requests'
set yrange [0:1]
set ytics 0, 0.2, 1
set format y '%.1f'
plot for [i = 1:nkeys] blocks index (i - 1) using 1:2 with lines lt i lw 2 notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with lines lt i lw 2 title key(i)
unset multiplot
