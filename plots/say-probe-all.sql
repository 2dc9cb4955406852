-- say-probe-all: one sentence for REPORT.md per probe experiment: per live
-- server, bit-identical share and how its reuse compared with the expected.
WITH per AS (SELECT run_id, min(vorder) AS vo, min(label) AS v,
                    sum(error IS NULL AND verified = 1) AS cmp,
                    sum(error IS NULL AND verified = 1 AND logits_equal = 1 AND decode_equal = 1 AND fork_step IS NULL
                        AND coalesce(json_equal, 1) = 1) AS ident,
                    sum(error IS NULL AND reuse_reported IS NOT NULL AND reuse_expected IS NOT NULL) AS chk,
                    coalesce(sum(error IS NULL AND reuse_reported < reuse_expected), 0) AS less,
                    coalesce(sum(error IS NULL AND reuse_reported > reuse_expected), 0) AS more,
                    1.0 * sum(CASE WHEN error IS NULL THEN reuse_reported END)
                        / nullif(sum(CASE WHEN error IS NULL AND reuse_reported IS NOT NULL THEN n_prompt END), 0) AS rf,
                    1.0 * sum(CASE WHEN error IS NULL AND reuse_reported IS NOT NULL THEN reuse_expected END)
                        / nullif(sum(CASE WHEN error IS NULL AND reuse_reported IS NOT NULL THEN n_prompt END), 0) AS ef,
                    sum(error IS NOT NULL) AS failed
             FROM req GROUP BY run_id),
s AS (SELECT vo, printf('%s: %d of %d requests bit-identical warm against cold; reuse %s of the prompt tokens ' ||
                        'reported, %s expected (%d of %d checks equal, %d less, %d more)%s', v, ident, cmp,
                        coalesce(printf('%.3f', rf), 'not'), coalesce(printf('%.3f', ef), 'nothing'),
                        chk - less - more, chk, less, more,
                        CASE failed WHEN 0 THEN '' ELSE printf('; %d failed by the server', failed) END) AS t
      FROM per)
SELECT 'In this database: ' || group_concat(t, '. ') || '.' FROM (SELECT t FROM s ORDER BY vo)
HAVING count(*) > 0;
