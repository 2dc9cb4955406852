-- plots/compat-v3.sql: read before lib.sql on a schema-3 results database
-- (PRAGMA user_version = 3, before --repeat and the modeled TTFT): temp views that
-- shadow main.runs and main.requests with the current columns, NULL where
-- version 3 had none. The same views as compat_views[3] in
-- harness/store/store.c.
CREATE TEMP VIEW runs AS SELECT *, NULL AS n_repeat, NULL AS calib_gflops, NULL AS calib_restore_gbs,
    NULL AS price_gflops, NULL AS price_restore_gbs, NULL AS price_source, NULL AS spec_sha256, NULL AS scale, NULL AS unit, NULL AS n_units,
    NULL AS shard, NULL AS n_shards, NULL AS plan_sha256, NULL AS server_url, NULL AS server_api, NULL AS server_engine,
    NULL AS server_info, NULL AS probe_opts FROM main.runs;
CREATE TEMP VIEW requests AS SELECT *, NULL AS ttft_cold_min_ms, NULL AS ttft_cold_max_ms, NULL AS ttft_reuse_min_ms,
    NULL AS ttft_reuse_max_ms, NULL AS model_cold_ms, NULL AS model_reuse_ms, NULL AS verified, NULL AS reuse_expected, NULL AS reuse_reported, NULL AS reuse_basis,
    NULL AS n_prompt_local, NULL AS prompt_diff, NULL AS json_equal, NULL AS n_probs, NULL AS error,
    NULL AS error_message, NULL AS http_status, NULL AS batch_k, NULL AS batch_equal,
    NULL AS batch_first_diff, NULL AS batch_ulp_first, NULL AS batch_max_ulp FROM main.requests;
