-- runs: variant LIKE 'load/%'
-- batch-load: per load run (series = its variant, load/KERNEL): 1 index, 2 kernel, 3 distinct greedy
-- outputs, 4 distinct logit byte strings (the top-K log-probabilities of every generated position),
-- both over the request sent alone and its sends under load, 5 % of the sends under load
-- bit-identical to the request alone, 6 sends (requests.extra's $.load, docs/probe.md).
SELECT r.variant, dense_rank() OVER (ORDER BY r.vorder) - 1, substr(r.variant, 6),
       sum(json_extract(q.extra, '$.load.distinct_tokens')), sum(json_extract(q.extra, '$.load.distinct_probs')),
       printf('%.2f', 100.0 * sum(json_extract(q.extra, '$.load.identical'))
                      / max(1, sum(json_extract(q.extra, '$.load.sends')))),
       sum(json_extract(q.extra, '$.load.sends'))
FROM requests q JOIN fig_runs r USING(run_id)
WHERE json_extract(q.extra, '$.load.sends') > 0
GROUP BY r.run_id ORDER BY r.vorder;
