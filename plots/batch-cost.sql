-- runs: variant LIKE 'sweep/%'
-- batch-cost: the cost of batch invariance at each batch size: one series "ref / blas": 1 batch size B,
-- 2 the ref kernel's tokens/s over the blas kernel's in the batched steps of the same requests (as
-- batch-sweep), 3 the slowdown in % (100 x (1 - ratio); negative: ref was faster).
WITH t AS (SELECT substr(r.variant, 7) AS k, r.sweep_value + 1 AS b,
                  1000.0 * sum(json_extract(q.extra, '$.batch_rows')) / sum(json_extract(q.extra, '$.batch_ms')) AS tps
           FROM requests q JOIN fig_runs r USING(run_id)
           WHERE q.batch_k IS NOT NULL AND r.sweep_value IS NOT NULL GROUP BY r.run_id)
SELECT 'ref / blas', printf('%g', a.b), printf('%.4f', a.tps / b.tps), printf('%.1f', 100.0 * (1 - a.tps / b.tps))
FROM t a JOIN t b ON a.b = b.b AND a.k = 'ref' AND b.k = 'blas'
ORDER BY a.b;
