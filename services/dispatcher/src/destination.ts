// A destination is the scheme + authority of a webhook URL ("https://hooks.example.com:443").
// Concurrency caps and circuit breakers are kept per destination, so one slow or dead receiver
// only ever uses its own share of the dispatcher. The SQL twin of destinationKey lets the claim
// query skip destinations that are already at their cap.

const AUTHORITY = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]+/;

export function destinationKey(url: string): string {
  return (url.match(AUTHORITY)?.[0] ?? url).toLowerCase();
}

/**
 * The same key computed by PostgreSQL from a `url` column (POSIX regex, same pattern), as a knex
 * raw fragment: the `?` of the pattern is escaped so knex does not take it for a binding.
 */
export function destinationKeySql(column: string): string {
  return `lower(coalesce(substring(${column} from '^[A-Za-z][A-Za-z0-9+.-]*://[^/\\?#]+'), ${column}))`;
}
