-- seed002-summary: per variant: label, TTFT p50 cold (ms), TTFT p50 reused
-- (ms), total prompt tokens, total prefilled tokens (reused run), requests.
WITH
cold AS (SELECT run_id, ttft_cold_ms AS x,
                row_number() OVER (PARTITION BY run_id ORDER BY ttft_cold_ms) AS k,
                count(*) OVER (PARTITION BY run_id) AS n
         FROM req WHERE ttft_cold_ms IS NOT NULL),
reuse AS (SELECT run_id, ttft_reuse_ms AS x,
                 row_number() OVER (PARTITION BY run_id ORDER BY ttft_reuse_ms) AS k,
                 count(*) OVER (PARTITION BY run_id) AS n
          FROM req WHERE ttft_reuse_ms IS NOT NULL),
c50 AS (SELECT run_id, avg(x) AS p50 FROM cold WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
r50 AS (SELECT run_id, avg(x) AS p50 FROM reuse WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
per AS (SELECT run_id, min(vorder) AS vo, min(variant) AS variant, sum(n_prompt) AS np,
               sum(n_prefilled) AS npf, count(*) AS n
        FROM req GROUP BY run_id)
SELECT coalesce(per.variant, 'run ' || per.run_id), round(c50.p50, 4),
       round(r50.p50, 4), per.np, per.npf, per.n
FROM per LEFT JOIN c50 USING (run_id) LEFT JOIN r50 USING (run_id)
ORDER BY per.vo, per.run_id;
