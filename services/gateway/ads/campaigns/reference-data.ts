import fs from 'node:fs'
import path from 'node:path'
import { SCHEMA_DIR } from '../../../common/schemas'

/**
 * Read-only catalogs the campaign-management operations serve and validate
 * against. They ship as data files under schemas/data/ (skipped by the
 * schema loader) so operators can review and update them without code:
 *
 *   advertiser-business-categories.json  the IAB-based business categories of
 *                                        PREROLL_VIEWS line items
 *   curated-categories.json              publisher lists of in-stream video
 *   line-item-placements.json            valid placement combinations per
 *                                        product_type
 */

export interface AdvertiserBusinessCategory {
  id: string
  name: string
  iab_categories: string[]
}

export interface CuratedCategory {
  id: string
  name: string
  description: string
  country_codes: string[]
  publisher_user_ids: string[]
  videos_monetized_in_last_thirty_days: number
  created_at: string
  updated_at: string
}

export const PRODUCT_TYPES = ['MEDIA', 'PROMOTED_ACCOUNT', 'PROMOTED_TWEETS'] as const
export type ProductType = (typeof PRODUCT_TYPES)[number]

export interface PlacementCombinations {
  product_type: ProductType
  placements: string[][]
}

function readData<T>(file: string): T {
  return JSON.parse(fs.readFileSync(path.join(SCHEMA_DIR, 'data', file), 'utf8')) as T
}

let businessCategories: AdvertiserBusinessCategory[] | undefined
let curatedCategories: CuratedCategory[] | undefined
let placements: PlacementCombinations[] | undefined
let businessCategoryByIab: Map<string, AdvertiserBusinessCategory> | undefined

export function advertiserBusinessCategories(): AdvertiserBusinessCategory[] {
  businessCategories ??= readData<AdvertiserBusinessCategory[]>('advertiser-business-categories.json')
  return businessCategories
}

/** The business category an IAB code belongs to (each code belongs to at most one). */
export function businessCategoryOf(iabCode: string): AdvertiserBusinessCategory | undefined {
  if (!businessCategoryByIab) {
    businessCategoryByIab = new Map()
    for (const c of advertiserBusinessCategories()) for (const code of c.iab_categories) businessCategoryByIab.set(code, c)
  }
  return businessCategoryByIab.get(iabCode)
}

/** IAB content taxonomy codes: a tier-1 `IAB<n>` or a tier-2 `IAB<n>-<m>`. */
export const IAB_CODE = /^IAB\d{1,2}(-\d{1,2})?$/

export function allCuratedCategories(): CuratedCategory[] {
  curatedCategories ??= readData<CuratedCategory[]>('curated-categories.json')
  return curatedCategories
}

export function curatedCategory(id: string): CuratedCategory | undefined {
  return allCuratedCategories().find((c) => c.id === id)
}

export function placementCombinations(): PlacementCombinations[] {
  placements ??= readData<PlacementCombinations[]>('line-item-placements.json')
  return placements
}

/** Every placement name any product type accepts. */
export function placementNames(): string[] {
  const names = new Set<string>()
  for (const p of placementCombinations()) for (const combo of p.placements) for (const name of combo) names.add(name)
  return [...names].sort()
}

/** Whether `chosen` (any order) is one of the combinations `productType` accepts. */
export function isValidPlacement(productType: ProductType, chosen: string[]): boolean {
  const key = [...chosen].sort().join(',')
  const entry = placementCombinations().find((p) => p.product_type === productType)
  return entry !== undefined && entry.placements.some((combo) => [...combo].sort().join(',') === key)
}
