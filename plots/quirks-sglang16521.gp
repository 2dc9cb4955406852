# caption: SGLang #16521 on the real SWE-agent trajectories: with the quirk prompt-key the finished request enters the radix tree under its prompt only, so each next turn reuses the previous prompt and recomputes the previous answer; fixed inserts prompt and answer (SGLang's fix) and reuses both, but the answer's rows were written by decode, so those requests are not bit-identical (both with --cap-prompt off, SGLang's behaviour); fixed-cap is the fix under the harness's rule, which reuses rows of prompts on the grid only.
# quirks-sglang16521: blocks = one per variant kind; columns: 1 transcript
# index, 2 transcript, 3 follow-up reuse fraction, 4 % bit-identical.
set multiplot title 'SGLang #16521: generated tokens missing from the radix key'
stats blocks index 0 using 1 nooutput
ng = int(STATS_max) + 1
set xrange [-0.55:ng - 0.45]
set grid noxtics
set xtics scale 0
set style fill solid 0.85 border -1
panel_l = 0.11
panel_gap = 0.12
eval panel(1, 2)
set ylabel 'reuse fraction, follow-up requests'
set yrange [0.5:1]
plot for [i = 1:nkeys] blocks index (i - 1) using ($1 + baroff(i, nkeys)):3:(barw(nkeys)) with boxes lt i notitle, \
     blocks index 0 using 1:(NaN):xtic(2) notitle
eval panel(2, 2)
set ylabel '% of requests bit-identical'
set yrange [0:105]
plot for [i = 1:nkeys] blocks index (i - 1) using ($1 + baroff(i, nkeys)):4:(barw(nkeys)) with boxes lt i notitle, \
     blocks index 0 using 1:(NaN):xtic(2) notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with boxes lt i title key(i)
unset multiplot
