-- say-quirks: one paragraph for REPORT.md with the numbers of each report's
-- bug and fix: follow-up reuse fraction (and prompt length) per variant and
-- context for vllm40696, follow-up reuse and % bit-identical for the others.
WITH per AS (SELECT run_id, min(vorder) AS vo, min(variant) AS v, min(sweep_value) AS sv, avg(n_prompt) AS np,
                    1.0 * sum(n_reused) FILTER (WHERE turn > 0) / sum(n_prompt) FILTER (WHERE turn > 0) AS fr,
                    100.0 * avg(logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1) AS ident,
                    max(block_size) AS bs
             FROM req GROUP BY run_id),
s AS (SELECT vo, sv, CASE WHEN v LIKE 'vllm40696/%'
                          THEN printf('%s (block %d) at %.0f-token prompts: follow-up reuse %.3f', v, bs, np, fr)
                          ELSE printf('%s: follow-up reuse %.3f, %.1f%% bit-identical', v, fr, ident) END AS t
      FROM per)
SELECT 'In this database: ' || group_concat(t, '; ') || '.' FROM (SELECT t FROM s ORDER BY vo, sv)
HAVING count(*) > 0;
