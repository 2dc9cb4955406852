-- say-seed004: one sentence for REPORT.md with the numbers of seed004: per
-- variant, the reuse fraction of the follow-up requests at each context length.
WITH
per AS (SELECT run_id, min(vorder) AS vo, coalesce(min(variant), 'run ' || run_id) AS v,
               min(sweep_value) AS ctx, 1.0 * sum(n_reused) / nullif(sum(n_prompt), 0) AS rf
        FROM req WHERE turn > 0 GROUP BY run_id),
pv AS (SELECT vo, v, group_concat(printf('%.3f at %g tokens', rf, ctx), ', ') AS l
       FROM (SELECT * FROM per ORDER BY ctx) GROUP BY vo, v)
SELECT 'In this database, the reuse fraction of the follow-up requests is: ' ||
       group_concat(v || ': ' || l, '; ') || '.'
FROM (SELECT * FROM pv ORDER BY vo) HAVING count(*) > 0;
