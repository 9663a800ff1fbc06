-- FerretDB v1 pushes a GridFS lookup down as `_jsonb -> 'files_id' @> $1`
-- (and `_jsonb -> 'filename' @> $1`), which its own btree indexes cannot
-- serve: every chunk read scans the whole bucket (8 reads/s at 1 KB with
-- 10,000 files in it, against 600 empty). MongoDB answers these from its
-- GridFS indexes; a GIN index on each expression lets FerretDB do the same.
-- Added to every bucket's tables (<bucket>_files_<hash>, <bucket>_chunks_<hash>)
-- as FerretDB creates them.
SET client_min_messages = warning;
CREATE OR REPLACE FUNCTION lab_gridfs_gin_indexes() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE
  created record;
  field text;
BEGIN
  FOR created IN SELECT object_identity FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'CREATE TABLE' LOOP
    field := CASE WHEN created.object_identity ~ '_chunks_[0-9a-f]{8}"?$' THEN 'files_id'
                  WHEN created.object_identity ~ '_files_[0-9a-f]{8}"?$' THEN 'filename' END;
    IF field IS NOT NULL THEN
      -- fastupdate off: a bulk load's entries go into the index itself, not a
      -- pending list that makes the planner prefer scanning the table
      EXECUTE format('CREATE INDEX ON %s USING gin ((_jsonb -> %L)) WITH (fastupdate = off)',
                     created.object_identity, field);
    END IF;
  END LOOP;
END $$;
DROP EVENT TRIGGER IF EXISTS lab_gridfs_gin_indexes;
CREATE EVENT TRIGGER lab_gridfs_gin_indexes ON ddl_command_end WHEN TAG IN ('CREATE TABLE')
  EXECUTE FUNCTION lab_gridfs_gin_indexes();
