-- say-seed001: one sentence for REPORT.md with the numbers of seed001, per
-- variant: requests, reuse fraction, tokens prefilled, top miss_where.
WITH
per AS (SELECT run_id, min(vorder) AS vo, coalesce(min(variant), 'run ' || run_id) AS v, count(*) AS n,
               1.0 * sum(n_reused) / nullif(sum(n_prompt), 0) AS rf, sum(n_prefilled) AS pf,
               sum(n_prompt) AS np
        FROM req GROUP BY run_id),
w AS (SELECT run_id, miss_where, count(*) AS c,
             row_number() OVER (PARTITION BY run_id ORDER BY count(*) DESC, miss_where) AS rk
      FROM req WHERE miss_where IS NOT NULL GROUP BY run_id, miss_where),
s AS (SELECT per.vo, printf('%s: %d requests, reuse fraction %.3f, %d of %d prompt tokens prefilled%s',
                            per.v, per.n, per.rf, per.pf, per.np,
                            CASE WHEN w.miss_where IS NULL THEN ''
                                 ELSE printf(', most frequent miss_where %s (%d request%s)', w.miss_where, w.c,
                                             CASE WHEN w.c = 1 THEN '' ELSE 's' END) END) AS t
      FROM per LEFT JOIN w ON w.run_id = per.run_id AND w.rk = 1)
SELECT 'In this database: ' || group_concat(t, '. ') || '.' FROM (SELECT t FROM s ORDER BY vo)
HAVING count(*) > 0;
