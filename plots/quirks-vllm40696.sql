-- quirks-vllm40696: the vllm40696/* runs, one per context length. Series: the
-- variant (quirk, fixed); one row per run: 1 mean prompt tokens, 2 reuse
-- fraction of the follow-up requests (turn > 0), 3 the run's block size.
-- runs: variant LIKE 'vllm40696/%'
SELECT label, printf('%.1f', avg(n_prompt)),
       printf('%.4f', 1.0 * sum(n_reused) FILTER (WHERE turn > 0) / sum(n_prompt) FILTER (WHERE turn > 0)),
       max(block_size)
FROM req GROUP BY run_id ORDER BY min(vorder), avg(n_prompt);
