-- plots/compat-v5.sql: read before lib.sql on a schema-5 results database
-- (PRAGMA user_version = 5, before experiments in shards): temp views that
-- shadow main.runs and main.requests with the current columns, NULL where
-- version 5 had none. The same views as compat_views[5] in
-- harness/store/store.c.
CREATE TEMP VIEW runs AS SELECT *, NULL AS spec_sha256, NULL AS scale, NULL AS unit, NULL AS n_units,
    NULL AS shard, NULL AS n_shards, NULL AS plan_sha256, NULL AS server_url, NULL AS server_api, NULL AS server_engine,
    NULL AS server_info, NULL AS probe_opts FROM main.runs;
CREATE TEMP VIEW requests AS SELECT *, NULL AS reuse_expected, NULL AS reuse_reported, NULL AS reuse_basis,
    NULL AS n_prompt_local, NULL AS prompt_diff, NULL AS json_equal, NULL AS n_probs, NULL AS error,
    NULL AS error_message, NULL AS http_status, NULL AS batch_k, NULL AS batch_equal,
    NULL AS batch_first_diff, NULL AS batch_ulp_first, NULL AS batch_max_ulp FROM main.requests;
