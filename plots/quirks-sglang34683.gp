# caption: SGLang #34683 on stories260K (a trained model): follow-up questions on one context. Cold against cold (the cold policy, which prefills everything again) is bit-identical; a radix hit whose suffix is prefilled as one extend pass from the match point (--align none, 8192-token passes as SGLang's chunked prefill) changes the logits; the same hit on the prefill grid (--align chunk) is bit-identical again.
# quirks-sglang34683: blocks = one per variant; columns: 1 index, 2 variant,
# 3 % bit-identical, 4 max ULP (1 when none).
set multiplot title 'SGLang #34683: a radix hit changes the numerics, cold runs agree'
set xrange [-0.6:2.6]
set grid noxtics
set xtics scale 0
set style fill solid 0.85 border -1
panel_l = 0.11
panel_gap = 0.13
eval panel(1, 2)
set ylabel '% of requests bit-identical'
set yrange [0:105]
plot for [i = 1:nkeys] blocks index (i - 1) using 1:3:(0.6):xtic(2) with boxes lt i notitle
eval panel(2, 2)
set ylabel 'largest logit ULP distance'
set logscale y
set yrange [0.8:*]
plot for [i = 1:nkeys] blocks index (i - 1) using 1:4:(0.6):xtic(2) with boxes lt i notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with boxes lt i title key(i)
unset multiplot
