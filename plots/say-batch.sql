-- say-batch: sentences for REPORT.md with the numbers of the batch experiment: per load run the
-- distinct answers over the sends; per kernel of the sweep the share bit-identical at B > 1 and the
-- ref/blas throughput ratio over B.
WITH
ld AS (SELECT r.variant AS v, r.vorder AS vo, sum(json_extract(q.extra, '$.load.sends')) AS n,
              sum(json_extract(q.extra, '$.load.distinct_tokens')) AS dt,
              sum(json_extract(q.extra, '$.load.distinct_probs')) AS dp,
              sum(json_extract(q.extra, '$.load.identical')) AS ide
       FROM requests q JOIN fig_runs r USING(run_id)
       WHERE r.variant LIKE 'load/%' AND json_extract(q.extra, '$.load.sends') > 0 GROUP BY r.run_id),
sw AS (SELECT substr(r.variant, 7) AS k, r.sweep_value + 1 AS b, avg(q.batch_equal) AS eq,
              1000.0 * sum(json_extract(q.extra, '$.batch_rows')) / sum(json_extract(q.extra, '$.batch_ms')) AS tps
       FROM requests q JOIN fig_runs r USING(run_id)
       WHERE r.variant LIKE 'sweep/%' AND q.batch_k IS NOT NULL GROUP BY r.run_id),
ratio AS (SELECT min(a.tps / b.tps) AS lo, max(a.tps / b.tps) AS hi, count(*) AS n
          FROM sw a JOIN sw b ON a.b = b.b AND a.k = 'ref' AND b.k = 'blas' WHERE a.b > 1)
SELECT 'Under concurrent load: ' || group_concat(printf('%s: %d sends beside 0 to 7 other generations, %d distinct greedy ' ||
       'output%s and %d distinct logit byte string%s over them and the request alone, %d of the sends bit-identical to alone',
       v, n, dt, CASE WHEN dt = 1 THEN '' ELSE 's' END, dp, CASE WHEN dp = 1 THEN '' ELSE 's' END, ide), '; ') || '.'
FROM (SELECT * FROM ld ORDER BY vo) HAVING count(*) > 0
UNION ALL
SELECT 'Against batch size (B > 1): ' || group_concat(printf('%s %.1f%% of requests bit-identical to alone', k, 100.0 * eq), ', ')
       || (SELECT CASE WHEN n > 0 THEN printf('; ref ran at %.2f to %.2f times blas''s tokens/s', lo, hi) ELSE '' END FROM ratio)
       || '.'
FROM (SELECT k, avg(eq) AS eq FROM sw WHERE b > 1 GROUP BY k ORDER BY k DESC) HAVING count(*) > 0;
