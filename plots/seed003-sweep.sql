-- runs: coalesce(variant, '') LIKE 'sweep/%'
-- seed003-sweep: per sweep run: series "align=A", C (sweep_value; else
-- ubatch under align none, chunk otherwise), TTFT p50 cold (ms), TTFT p50
-- reused (ms), % of requests not bit-identical, requests.
-- p50 = the middle value, or the mean of the two middle values.
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
per AS (SELECT run_id, min(vorder) AS vo, min(align) AS align,
               coalesce(min(sweep_value), CASE WHEN min(align) = 'none' THEN min(ubatch) ELSE min(chunk) END) AS c,
               100.0 * avg(NOT (logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1)) AS div, count(*) AS n
        FROM req GROUP BY run_id)
SELECT 'align=' || coalesce(per.align, '-'), printf('%g', per.c), round(c50.p50, 4), round(r50.p50, 4),
       printf('%.3f', per.div), per.n
FROM per LEFT JOIN c50 USING (run_id) LEFT JOIN r50 USING (run_id)
WHERE per.c IS NOT NULL
ORDER BY per.vo, per.c;
