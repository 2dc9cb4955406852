-- tab-policies: one row per run of the policies experiment: workload
-- (transcript/model), alignment, policy, requests, reuse fraction, tokens
-- prefilled by the reused run, TTFT p50 cold and reused (ms), the most bytes
-- the cache held after a request (MiB), % bit-identical (logits, decode steps
-- and state left equal under memcmp).
WITH per AS (SELECT run_id, min(vorder) AS vo, min(policy) AS policy, min(align) AS al,
                    substr(min(variant), 1, instr(min(variant), '/' || min(align) || '/') - 1) AS work,
                    count(*) AS n, sum(n_prompt) AS np, sum(n_reused) AS nr, sum(n_prefilled) AS npf,
                    max(cache_bytes) / 1048576.0 AS mib,
                    100.0 * avg(logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1) AS ident
             FROM req GROUP BY run_id)
SELECT per.work AS "workload", per.al AS "align", per.policy AS "policy", per.n AS "requests",
       printf('%.3f', 1.0 * per.nr / nullif(per.np, 0)) AS "reuse fraction",
       per.npf AS "prefilled tokens",
       CASE WHEN t.cold_p50 IS NULL THEN '-' ELSE printf('%.1f', t.cold_p50) END AS "TTFT p50 cold (ms)",
       CASE WHEN t.reuse_p50 IS NULL THEN '-' ELSE printf('%.1f', t.reuse_p50) END AS "TTFT p50 reused (ms)",
       CASE WHEN per.mib IS NULL THEN '-' ELSE printf('%.2f', per.mib) END AS "cache held (MiB, max)",
       printf('%.1f', per.ident) AS "bit-identical (%)"
FROM per LEFT JOIN ttft_p50 t ON t.run_id = per.run_id AND t.followup = 0
ORDER BY per.vo, per.run_id;
