-- runs: sweep_value IS NOT NULL
-- seed004-ttft: per run: series (variant label), context length (tokens),
-- TTFT p50 cold (ms), TTFT p50 reused (ms), over the follow-up requests
-- (turn > 0); a NULL median is an empty field (no point).
WITH per AS (SELECT run_id, min(vorder) AS vo, min(label) AS label, min(sweep_value) AS ctx
        FROM req WHERE turn > 0 GROUP BY run_id)
SELECT per.label, per.ctx, round(t.cold_p50, 4), round(t.reuse_p50, 4)
FROM per LEFT JOIN ttft_p50 t ON t.run_id = per.run_id AND t.followup = 1
WHERE t.cold_p50 IS NOT NULL OR t.reuse_p50 IS NOT NULL
ORDER BY per.vo, per.ctx;
