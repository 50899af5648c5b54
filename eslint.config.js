import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default tseslint.config(
  { ignores: ['**/node_modules/**', 'data/**', 'dist/**', 'services/dashboard/public/vendor/**', 'charts/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  { files: ['services/dashboard/public/**/*.js'], languageOptions: { globals: globals.browser } },
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'off',
    },
  },
);
