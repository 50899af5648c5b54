// The administrative key lives only in this tab's session storage: it is gone when the tab closes,
// it is never put in a URL, and other tabs must sign in on their own.
const KEY_NAME = 'switchboard.adminKey';

export function readAdminKey() {
  try {
    return sessionStorage.getItem(KEY_NAME) ?? '';
  } catch {
    return ''; // storage disabled: the operator signs in again on every load
  }
}

export function saveAdminKey(key) {
  sessionStorage.setItem(KEY_NAME, key);
}

export function forgetAdminKey() {
  try {
    sessionStorage.removeItem(KEY_NAME);
  } catch {
    /* nothing stored */
  }
}
