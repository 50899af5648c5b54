// Custom resource names (crds/*.yaml) that the operator and the gateway both use, kept here
// because the gateway does not depend on the operator package.
export const CRD_GROUP = 'switchboard.dev';
export const CRD_VERSION = 'v1alpha1';
export const INSTANCES_PLURAL = 'instances';
/** Set by the gateway on the resources it creates: such an Instance without a database row was
 * deleted through the API and must not be adopted (re-created) by the operator. */
export const ORIGIN_LABEL = 'switchboard.dev/origin';
export const ORIGIN_API = 'api';
