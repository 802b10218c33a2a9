/**
 * The version of the advertising interface reported in `x-current-api-version`
 * on every ads response, successes and errors alike (docs/ads.md). Its
 * own module: the HTTP layer's error rendering (../http.ts) needs it, and
 * ./conventions imports that layer.
 */
export const ADS_API_VERSION = '12'
