// orderDashboard.ts
// Browser-side widget for the back office: shows a customer's name and the
// running total of their orders, reading from the Brisa users and orders services.

export interface UserDto {
  id: number;
  email: string;
  display_name: string;
  active: boolean;
}

export interface OrderDto {
  id: number;
  customer_id: number;
  status: "paid" | "queued" | "reserved" | "shipped" | "backorder";
  total_cents: number;
}

export class ApiError extends Error {
  constructor(public readonly status: number, message: string, public readonly requestId?: string) {
    super(`${status} ${message}`);
  }
}

const API_BASE = "/api";

async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  const res = await fetch(`${API_BASE}${path}`, { headers: { Accept: "application/json" }, signal });
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    throw new ApiError(res.status, body.error ?? res.statusText, res.headers.get("X-Request-Id") ?? undefined);
  }
  return (await res.json()) as T;
}

/** Returns the display name of a user, or the e-mail when the name is blank. */
export async function getUserName(userId: number, signal?: AbortSignal): Promise<string> {
  const user = await getJson<UserDto>(`/users/${userId}`, signal);
  return user.display_name.trim() || user.email;
}

/** Sums the totals of a customer's orders, skipping the ones still on backorder. */
export async function fetchOrderTotal(customerId: number, signal?: AbortSignal): Promise<number> {
  const orders = await getJson<OrderDto[]>(`/orders?customer_id=${customerId}`, signal);
  return orders
    .filter((o) => o.status !== "backorder")
    .reduce((sum, o) => sum + o.total_cents, 0);
}

/** Formats an amount in cents as a localised currency string, e.g. "1.234,50 €". */
export function formatCents(cents: number, locale = "es-ES", currency = "EUR"): string {
  return new Intl.NumberFormat(locale, { style: "currency", currency }).format(cents / 100);
}

export class OrderDashboard {
  private controller: AbortController | null = null;
  private refreshTimer: number | undefined;

  constructor(private readonly root: HTMLElement, private readonly customerId: number) {}

  /** Loads name and total in parallel; a newer refresh aborts the previous one. */
  async refresh(): Promise<void> {
    this.controller?.abort();
    this.controller = new AbortController();
    const { signal } = this.controller;
    this.root.classList.add("loading");
    try {
      const [name, total] = await Promise.all([
        getUserName(this.customerId, signal),
        fetchOrderTotal(this.customerId, signal),
      ]);
      this.render(name, total);
    } catch (err) {
      if (err instanceof DOMException && err.name === "AbortError") return;
      this.renderError(err instanceof ApiError ? err : new ApiError(0, String(err)));
    } finally {
      this.root.classList.remove("loading");
    }
  }

  startAutoRefresh(intervalMs = 30_000): void {
    this.stopAutoRefresh();
    this.refreshTimer = window.setInterval(() => void this.refresh(), intervalMs);
  }

  stopAutoRefresh(): void {
    if (this.refreshTimer !== undefined) window.clearInterval(this.refreshTimer);
    this.refreshTimer = undefined;
  }

  private render(name: string, totalCents: number): void {
    this.root.innerHTML = "";
    const title = document.createElement("h3");
    title.textContent = name;
    const total = document.createElement("p");
    total.textContent = `Total pedidos: ${formatCents(totalCents)}`;
    this.root.append(title, total);
  }

  private renderError(err: ApiError): void {
    const hint = err.status === 429 ? "Demasiadas peticiones, reintenta en unos segundos." : err.message;
    this.root.textContent = err.requestId ? `${hint} (ref. ${err.requestId})` : hint;
  }
}
