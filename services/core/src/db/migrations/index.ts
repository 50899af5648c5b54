// Migrations are listed here rather than discovered on disk, so they run the same from source
// (tsx), from a bundle and in tests. Append new ones; never edit one that has shipped.
import type { Knex } from 'knex';
import * as m001 from './001_foundation.ts';
import * as m002 from './002_queue_count.ts';
import * as m003 from './003_delivery_destination.ts';
import * as m004 from './004_event_sweep_index.ts';
import * as m005 from './005_sandbox_receipts_owed.ts';
import * as m006 from './006_app_key_project.ts';
import * as m007 from './007_delivery_destination_url.ts';
import * as m008 from './008_delivery_lease_owner.ts';
import * as m009 from './009_dispatcher_replicas.ts';
import * as m010 from './010_media_mimetype_width.ts';
import * as m011 from './011_media_purge_queue.ts';
import * as m012 from './012_sandbox_echo_owed.ts';
import * as m013 from './013_instance_spec_stamp.ts';
import * as m014 from './014_encryption_key_check.ts';
import * as m015 from './015_instance_deletion_requested.ts';
import * as m016 from './016_instance_unlink_requested.ts';
import * as m017 from './017_drop_host_destination.ts';
import * as m018 from './018_sandbox_ledger_cascade.ts';
import * as m019 from './019_rate_limit_windows.ts';
import * as m020 from './020_queue_slot_while_sending.ts';
import * as m021 from './021_auth_state_cascade.ts';
import * as m022 from './022_settings_notify.ts';
import * as m023 from './023_message_counts.ts';

interface Migration {
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
}

const migrations: Record<string, Migration> = {
  '001_foundation': m001,
  '002_queue_count': m002,
  '003_delivery_destination': m003,
  '004_event_sweep_index': m004,
  '005_sandbox_receipts_owed': m005,
  '006_app_key_project': m006,
  '007_delivery_destination_url': m007,
  '008_delivery_lease_owner': m008,
  '009_dispatcher_replicas': m009,
  '010_media_mimetype_width': m010,
  '011_media_purge_queue': m011,
  '012_sandbox_echo_owed': m012,
  '013_instance_spec_stamp': m013,
  '014_encryption_key_check': m014,
  '015_instance_deletion_requested': m015,
  '016_instance_unlink_requested': m016,
  '017_drop_host_destination': m017,
  '018_sandbox_ledger_cascade': m018,
  '019_rate_limit_windows': m019,
  '020_queue_slot_while_sending': m020,
  '021_auth_state_cascade': m021,
  '022_settings_notify': m022,
  '023_message_counts': m023,
};

export const migrationSource: Knex.MigrationSource<string> = {
  getMigrations: async () => Object.keys(migrations),
  getMigrationName: (name) => name,
  getMigration: async (name) => migrations[name],
};
