/** NATS_URL's servers: one URL, or several separated by commas (a cluster's seed list). Every
 *  connection of a process (bus, media store) must read the variable the same way. */
export function natsServers(natsUrl: string): string[] {
  return natsUrl.split(',').map((url) => url.trim()).filter(Boolean);
}
