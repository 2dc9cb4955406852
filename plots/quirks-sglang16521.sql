-- quirks-sglang16521: the sglang16521/* runs. Series: the variant kind
-- (quirk, fixed, fixed-cap); one row per transcript: 1 transcript index,
-- 2 transcript, 3 reuse fraction of the follow-up requests, 4 % bit-identical.
-- runs: variant LIKE 'sglang16521/%'
WITH per AS (SELECT run_id, min(vorder) AS vo, min(variant) AS v,
                    1.0 * sum(n_reused) FILTER (WHERE turn > 0) / sum(n_prompt) FILTER (WHERE turn > 0) AS reuse,
                    100.0 * avg(logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1) AS ident
             FROM req GROUP BY run_id),
parts AS (SELECT *, substr(v, 13, instr(substr(v, 13), '/') - 1) AS kind,
                 substr(substr(v, 13), instr(substr(v, 13), '/') + 1) AS tr FROM per),
g AS (SELECT tr, dense_rank() OVER (ORDER BY min(vo)) - 1 AS gi FROM parts GROUP BY tr)
SELECT kind, g.gi, tr, printf('%.4f', reuse), printf('%.2f', ident)
FROM parts JOIN g USING (tr)
ORDER BY CASE kind WHEN 'quirk' THEN 0 WHEN 'fixed' THEN 1 ELSE 2 END, g.gi;
