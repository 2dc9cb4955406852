-- runs: sweep_value IS NOT NULL
-- seed004-reuse: per run: series (variant label), context length (tokens,
-- sweep_value), reuse fraction sum(n_reused) / sum(n_prompt) over the
-- follow-up requests (turn > 0), follow-up requests.
SELECT label, sweep_value, printf('%.5f', 1.0 * sum(n_reused) / sum(n_prompt)), count(*)
FROM req WHERE turn > 0 GROUP BY run_id HAVING sum(n_prompt) > 0
ORDER BY min(vorder), sweep_value;
