// The whole schema of the first release. Timestamps are timestamptz; JSON is jsonb.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('projects', (t) => {
    t.string('id', 40).primary();
    t.string('name', 70).notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('instances', (t) => {
    t.string('id', 40).primary();
    t.string('name', 70).notNullable();
    t.string('project_id', 40).nullable().references('projects.id').onDelete('SET NULL');
    t.string('state', 20).notNullable().defaultTo('stopped');
    t.boolean('paused').notNullable().defaultTo(true);
    t.string('phone', 32).nullable();
    t.text('qr_code').nullable();
    t.jsonb('settings').notNullable().defaultTo('{}');
    t.jsonb('webhook').notNullable().defaultTo('{}');
    t.text('webhook_secret_sealed').nullable();
    t.string('token_hash', 64).notNullable().unique();
    t.text('token_sealed').notNullable();
    t.timestamp('last_pairing_at', { useTz: true }).nullable();
    t.timestamp('reset_requested_at', { useTz: true }).nullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['project_id']);
  });

  // Integration keys ("apps"): hashed, shown once, revocable one by one.
  await knex.schema.createTable('app_keys', (t) => {
    t.string('id', 40).primary();
    t.string('instance_id', 40).notNullable().references('instances.id').onDelete('CASCADE');
    t.string('name', 70).notNullable();
    t.string('project_id', 40).nullable();
    t.string('key_prefix', 16).notNullable();
    t.string('key_hash', 64).notNullable().unique();
    t.timestamp('revoked_at', { useTz: true }).nullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['instance_id']);
  });

  // Send queue items. `payload` holds the content (text, caption, fileName, mimetype, ptt, mediaId).
  await knex.schema.createTable('send_items', (t) => {
    t.string('id', 40).primary();
    t.string('instance_id', 40).notNullable().references('instances.id').onDelete('CASCADE');
    t.string('messenger_id', 64).notNullable();
    t.string('phone', 64).notNullable();
    t.string('type', 16).notNullable();
    t.jsonb('payload').notNullable();
    t.string('status', 16).notNullable();
    t.jsonb('error').nullable();
    t.string('idempotency_key', 128).nullable();
    t.string('content_hash', 64).nullable();
    t.text('trace_context').nullable();
    t.timestamp('expires_at', { useTz: true }).notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.unique(['instance_id', 'idempotency_key']);
    t.unique(['instance_id', 'messenger_id']);
    t.index(['instance_id', 'status', 'created_at']);
    t.index(['status', 'expires_at']);
  });

  await knex.schema.createTable('incoming', (t) => {
    t.string('id', 40).primary();
    t.string('instance_id', 40).notNullable().references('instances.id').onDelete('CASCADE');
    t.string('message_id', 128).notNullable();
    t.string('from', 128).nullable();
    t.string('phone', 32).nullable();
    t.string('chat_lid', 128).nullable();
    t.string('participant', 128).nullable();
    t.boolean('from_me').notNullable().defaultTo(false);
    t.boolean('from_api').notNullable().defaultTo(false);
    t.string('name', 256).nullable();
    t.string('type', 16).notNullable();
    t.text('text').nullable();
    t.jsonb('media').nullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.unique(['instance_id', 'message_id']);
    t.index(['instance_id', 'created_at']);
  });

  // Events with their exact webhook body (identical bytes on every attempt).
  await knex.schema.createTable('events', (t) => {
    t.string('id', 40).primary();
    t.string('instance_id', 40).notNullable().references('instances.id').onDelete('CASCADE');
    t.string('type', 32).notNullable();
    t.text('body').notNullable();
    t.text('trace_context').nullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['instance_id', 'created_at']);
  });

  // One delivery per event (routing picks exactly one URL). Scheduled from here, not from the bus.
  await knex.schema.createTable('deliveries', (t) => {
    t.string('event_id', 40).primary().references('events.id').onDelete('CASCADE');
    t.string('instance_id', 40).notNullable();
    t.string('status', 16).notNullable();
    t.text('url').nullable();
    t.integer('attempts').notNullable().defaultTo(0);
    t.integer('last_status_code').nullable();
    t.text('last_error').nullable();
    t.timestamp('next_attempt_at', { useTz: true }).nullable();
    t.timestamp('delivered_at', { useTz: true }).nullable();
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['status', 'next_attempt_at']);
    t.index(['instance_id', 'status']);
  });

  // Transactional outbox: rows written with the record they announce, relayed to the bus.
  await knex.schema.createTable('outbox', (t) => {
    t.bigIncrements('seq').primary();
    t.string('subject', 200).notNullable();
    t.string('msg_id', 64).notNullable();
    t.text('payload').notNullable();
    t.jsonb('headers').notNullable().defaultTo('{}');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('media', (t) => {
    t.string('id', 40).primary();
    t.string('instance_id', 40).notNullable().references('instances.id').onDelete('CASCADE');
    t.string('direction', 10).notNullable();
    t.string('mimetype', 128).notNullable();
    t.string('file_name', 256).nullable();
    t.bigInteger('size').notNullable();
    t.string('sha256', 64).nullable();
    t.integer('seconds').nullable();
    t.boolean('voice_note').notNullable().defaultTo(false);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['created_at']);
    t.index(['instance_id']);
  });

  // Network session auth state (Baileys creds and Signal keys, sandbox creds), sealed.
  await knex.schema.createTable('auth_state', (t) => {
    t.string('instance_id', 40).notNullable();
    t.string('category', 64).notNullable();
    t.string('key_id', 256).notNullable();
    t.text('value_sealed').notNullable();
    t.primary(['instance_id', 'category', 'key_id']);
  });

  // Records every message the sandbox network accepted, so tests can prove "never sent twice".
  await knex.schema.createTable('sandbox_ledger', (t) => {
    t.bigIncrements('seq').primary();
    t.string('instance_id', 40).notNullable();
    t.string('messenger_id', 64).notNullable();
    t.string('phone', 64).notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['instance_id', 'messenger_id']);
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of ['sandbox_ledger', 'auth_state', 'media', 'outbox', 'deliveries', 'events', 'incoming', 'send_items', 'app_keys', 'instances', 'projects']) {
    await knex.schema.dropTableIfExists(table);
  }
}
