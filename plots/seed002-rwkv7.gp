# caption: The same agent loop on a real trained recurrent model, the tiny RWKV-7 of rwkv.cpp's test suite (834K parameters, byte vocabulary) converted with kvreplay model convert --from rwkv.cpp: cumulative wall time to first token of the reused path (s) against the turn, quirk = full-reprocess, fixed = restore from a grid checkpoint; grey: the cold path.
# seed002-rwkv7: blocks = one per series, the variants first, then
# "rwkv7 cold"; columns: 1 turn, 2 cumulative seconds.
set multiplot title 'seed002 on a real model: cumulative TTFT, RWKV-7 (834K, rwkv.cpp)'
set xlabel 'turn (request number, replay order)'
set ylabel 'cumulative TTFT (s)'
set yrange [0:*]
set xrange [0.5:*]
eval cumulative_plot
unset multiplot
