-- runs: variant LIKE 'sweep/%'
-- batch-sweep: per sweep run (series = kernel): 1 batch size B (the request and B - 1 other sequences:
-- replay --batch-check B - 1, runs.sweep_value + 1), 2 % of requests whose rows computed in the batch are
-- bit-identical to their cold rows alone (batch_equal), 3 tokens/s of the batched steps (every row they
-- computed, the other sequences' too, over their wall time: requests.extra's $.batch_rows, $.batch_ms),
-- 4 requests.
SELECT substr(r.variant, 7), printf('%g', r.sweep_value + 1), printf('%.2f', 100.0 * avg(q.batch_equal)),
       printf('%.1f', 1000.0 * sum(json_extract(q.extra, '$.batch_rows')) / sum(json_extract(q.extra, '$.batch_ms'))),
       count(*)
FROM requests q JOIN fig_runs r USING(run_id)
WHERE q.batch_k IS NOT NULL AND r.sweep_value IS NOT NULL
GROUP BY r.run_id ORDER BY r.vorder, r.sweep_value;
