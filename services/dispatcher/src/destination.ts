// A destination is the scheme + authority of a webhook URL ("https://hooks.example.com:443").
// Concurrency caps and circuit breakers are kept per destination, so one slow or dead receiver
// only ever uses its own share of the dispatcher. Its SQL twin is the `deliveries.destination`
// column (migration 003_delivery_destination), by which the claim query skips destinations at
// their cap.

const AUTHORITY = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]+/;

export function destinationKey(url: string): string {
  return (url.match(AUTHORITY)?.[0] ?? url).toLowerCase();
}
