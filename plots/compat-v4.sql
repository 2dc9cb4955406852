-- plots/compat-v4.sql: read before lib.sql on a schema-4 results database
-- (PRAGMA user_version = 4, before requests.verified): temp views that
-- shadow main.runs and main.requests with the current columns, NULL where
-- version 4 had none. The same views as compat_views[4] in
-- harness/store/store.c.
CREATE TEMP VIEW runs AS SELECT * FROM main.runs;
CREATE TEMP VIEW requests AS SELECT *, NULL AS verified FROM main.requests;
