-- runs: coalesce(variant, '') LIKE 'sweep/%'
-- seed003-sweep: per sweep run: series "align=A", C (sweep_value; else
-- ubatch under align none, chunk otherwise), then over the run's requests
-- the p50 (ms) of: the measured cold TTFT (each request's median over its
-- --repeat timings), of each request's fastest and slowest cold timing (the
-- band), the same three for the reused run, the modeled cold and reused
-- TTFT; % of requests not bit-identical; requests.
-- p50 = the middle value, or the mean of the two middle values (lib.sql's ttft_p50).
WITH per AS (SELECT run_id, min(vorder) AS vo, min(align) AS align,
               coalesce(min(sweep_value), CASE WHEN min(align) = 'none' THEN min(ubatch) ELSE min(chunk) END) AS c,
               100.0 * avg(NOT (logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1)) AS div, count(*) AS n
        FROM req GROUP BY run_id)
SELECT 'align=' || coalesce(per.align, '-'), printf('%g', per.c),
       round(t.cold_p50, 4), round(t.cold_lo, 4), round(t.cold_hi, 4),
       round(t.reuse_p50, 4), round(t.reuse_lo, 4), round(t.reuse_hi, 4),
       round(t.model_cold_p50, 4), round(t.model_reuse_p50, 4),
       printf('%.3f', per.div), per.n
FROM per LEFT JOIN ttft_p50 t ON t.run_id = per.run_id AND t.followup = 0
WHERE per.c IS NOT NULL
ORDER BY per.vo, per.c;
