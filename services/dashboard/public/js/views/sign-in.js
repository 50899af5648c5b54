// Sign-in with the administrative key. The key is checked against an admin-only endpoint before
// it is kept (in session storage, by app.js); it never appears in the URL.
import { field, form, h, submitting } from '../dom.js';
import { ApiError } from '../api.js';

export function render(container, { api, onSignedIn }) {
  const keyField = field({
    label: 'Administrative key',
    name: 'adminKey',
    type: 'password',
    hint: 'Kept only in this browser tab until you sign out or close it.',
    attrs: { autocomplete: 'off', spellcheck: 'false', required: true }, // not offered to a password manager
  });
  const signInForm = form(
    { onsubmit: (event) => submit(event) },
    keyField,
    h('button', { type: 'submit' }, 'Sign in'),
  );

  async function submit(event) {
    event.preventDefault();
    const key = signInForm.elements.namedItem('adminKey').value.trim();
    await submitting(signInForm, async () => {
      if (!key) throw new ApiError(400, { errors: [{ path: 'adminKey', message: 'Enter the administrative key.' }] });
      try {
        await api.get('/api/projects', { key });
      } catch (error) {
        throw explain(error);
      }
      onSignedIn(key);
    });
  }

  container.append(
    h(
      'section',
      { class: 'card sign-in', 'aria-labelledby': 'sign-in-title' },
      h('h1', { id: 'sign-in-title', tabindex: '-1' }, 'Sign in'),
      h('p', { class: 'muted' }, 'Manage instances, webhooks and activity of this Switchboard service.'),
      signInForm,
    ),
  );
}

function explain(error) {
  if (error.status === 401) return new ApiError(401, { detail: 'Sign-in failed.', errors: [{ path: 'adminKey', message: 'This key was not accepted. Check it and try again.' }] });
  if (error.status === 403) return new ApiError(403, { detail: 'Sign-in failed.', errors: [{ path: 'adminKey', message: 'This is an instance credential, not the administrative key.' }] });
  return error;
}
