-- runs: sweep_value IS NOT NULL
-- seed004-ttft: per run: series (variant label), context length (tokens),
-- TTFT p50 cold (ms), TTFT p50 reused (ms), over the follow-up requests
-- (turn > 0); a NULL median is an empty field (no point).
WITH
cold AS (SELECT run_id, ttft_cold_ms AS x,
                row_number() OVER (PARTITION BY run_id ORDER BY ttft_cold_ms) AS k,
                count(*) OVER (PARTITION BY run_id) AS n
         FROM req WHERE turn > 0 AND ttft_cold_ms IS NOT NULL),
reuse AS (SELECT run_id, ttft_reuse_ms AS x,
                 row_number() OVER (PARTITION BY run_id ORDER BY ttft_reuse_ms) AS k,
                 count(*) OVER (PARTITION BY run_id) AS n
          FROM req WHERE turn > 0 AND ttft_reuse_ms IS NOT NULL),
c50 AS (SELECT run_id, avg(x) AS p50 FROM cold WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
r50 AS (SELECT run_id, avg(x) AS p50 FROM reuse WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
per AS (SELECT run_id, min(vorder) AS vo, min(label) AS label, min(sweep_value) AS ctx
        FROM req WHERE turn > 0 GROUP BY run_id)
SELECT per.label, per.ctx, round(c50.p50, 4), round(r50.p50, 4)
FROM per LEFT JOIN c50 USING (run_id) LEFT JOIN r50 USING (run_id)
WHERE c50.p50 IS NOT NULL OR r50.p50 IS NOT NULL
ORDER BY per.vo, per.ctx;
