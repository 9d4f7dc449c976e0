"""Deterministic synthetic schemas for the index benchmarks: one wide database and a many-database test bed.

Everything comes from a seed (`random.Random`, never `hash()`), so two runs with the same seed
write the same databases and the same questions.

- `wide_schema(n_tables, seed)`: `n_tables` tables of 8–20 columns from 36 business domains, each
  domain's core entities (e.g. `sales_order_line(order_line_id, order_id → sales_order, …)`) plus
  the tables real warehouses are full of (status histories, notes, audit logs, attachments, type
  lookups, tags, daily summaries, archives), names prefixed by domain, with foreign keys and a few
  rows per table.
- `make_test_bed(n_databases, seed)`: one database per domain (3 to 60 tables, a few big ones on
  purpose), each with a description, 5–8 sample questions and held-out test questions written
  from its schema by templates (phrased with the entities' everyday names, not table names).
- `write_sqlite(tables, path)` and `ddl_script(tables, dialect)` write them out (SQLite or PostgreSQL).

>>> wide = wide_schema(40, seed=7)
>>> len(wide), all(8 <= len(t.columns) <= 20 for t in wide), wide == wide_schema(40, seed=7)
(40, True, True)
>>> bed = make_test_bed(3, seed=7)
>>> [len(db.sample_questions) >= 5 and len(db.test_questions) >= 5 for db in bed]
[True, True, True]
"""

from __future__ import annotations

import random
import re
import sqlite3
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

# --- the domains ---------------------------------------------------------------------------------
# Each entity: (table, "everyday name; another everyday name", "column:kind col>referenced_table …").
# Kinds: int qty money pct num date ts bool first last person name email phone code text city country
# and cat(a|b|c) (underscores in values become spaces). The primary key `<table>_id` is implied.


@dataclass(frozen=True)
class Domain:
    """A business domain: its test-bed database name, table prefix in the wide schema, description, entities."""

    name: str
    prefix: str
    description: str
    entities: tuple[tuple[str, str, str], ...]


DOMAINS: tuple[Domain, ...] = (
    Domain("retail_sales", "sales", "Retail sales: customers, stores, products, orders and order lines, returns and promotions.", (
        ("customer", "shoppers; clients", "first_name:first last_name:last email:email city:city loyalty_tier:cat(bronze|silver|gold|platinum) signup_date:date"),
        ("store", "shops; retail outlets", "store_name:name city:city region:cat(north|south|east|west) opened_on:date floor_area_sqm:num"),
        ("product", "items we sell; merchandise", "product_name:name category:cat(apparel|electronics|home|toys|grocery) brand:name list_price:money unit_cost:money"),
        ("sales_order", "purchases; customer orders", "customer_id>customer store_id>store order_date:date channel:cat(online|in_store|phone) status:cat(open|shipped|cancelled|returned) total_amount:money"),
        ("sales_order_line", "line items; order lines", "order_id>sales_order product_id>product quantity:qty unit_price:money discount_pct:pct"),
        ("promotion", "discount campaigns; promos", "promo_code:code start_date:date end_date:date discount_pct:pct channel:cat(online|in_store|all)"),
        ("sales_return", "returned goods; refunds", "order_id>sales_order return_date:date reason:cat(damaged|wrong_size|not_needed|late) refund_amount:money"),
    )),
    Domain("hr_payroll", "hr", "Human resources and payroll: employees, departments, positions, salaries, leave and performance reviews.", (
        ("department", "departments; teams", "department_name:cat(Engineering|Finance|Sales|Operations|Legal|Marketing) cost_center:code location:city"),
        ("job_position", "job titles; roles", "title:cat(Analyst|Engineer|Manager|Director|Clerk) grade:cat(G1|G2|G3|G4|G5) min_salary:money max_salary:money"),
        ("employee", "staff; workers; personnel", "first_name:first last_name:last department_id>department position_id>job_position hire_date:date employment_type:cat(full_time|part_time|contractor) gender:cat(F|M|X)"),
        ("salary_payment", "paychecks; payroll payments", "employee_id>employee pay_date:date gross_pay:money tax_withheld:money net_pay:money"),
        ("leave_request", "time off; vacation requests", "employee_id>employee leave_type:cat(vacation|sick|parental|unpaid) start_date:date end_date:date days:qty approved:bool"),
        ("performance_review", "appraisals; performance evaluations", "employee_id>employee review_date:date rating:cat(exceeds|meets|below) score:num reviewer:person"),
        ("training_enrollment", "training courses taken; course sign-ups", "employee_id>employee course_name:name completed_on:date hours:qty cost:money"),
    )),
    Domain("warehouse_inventory", "inv", "Warehouse inventory: warehouses, bins, stock levels, stock movements, suppliers and goods receipts.", (
        ("warehouse", "distribution centers; depots", "warehouse_name:name city:city capacity_pallets:qty manager:person"),
        ("supplier", "vendors; suppliers", "supplier_name:name country:country lead_time_days:qty rating:num"),
        ("sku", "stock keeping units; stocked items", "sku_code:code description:text category:cat(raw_material|finished_good|packaging|spare_part) unit_of_measure:cat(each|box|kg|litre) reorder_point:qty supplier_id>supplier"),
        ("bin_location", "shelves; storage bins", "warehouse_id>warehouse aisle:code shelf_level:qty max_weight_kg:num"),
        ("stock_level", "on-hand quantities; inventory balances", "sku_id>sku bin_id>bin_location quantity_on_hand:qty quantity_reserved:qty counted_at:ts"),
        ("stock_movement", "inventory transfers; stock moves", "sku_id>sku from_bin_id>bin_location to_bin_id>bin_location moved_qty:qty movement_type:cat(receipt|pick|transfer|adjustment) moved_at:ts"),
        ("goods_receipt", "deliveries received; inbound receipts", "supplier_id>supplier warehouse_id>warehouse received_on:date pallets:qty inspection_passed:bool"),
    )),
    Domain("general_ledger", "gl", "Finance and accounting: chart of accounts, journal entries and lines, fiscal periods, budgets and cost centers.", (
        ("account", "ledger accounts; GL accounts", "account_number:code account_name:name account_type:cat(asset|liability|equity|revenue|expense) is_active:bool"),
        ("cost_center", "cost centres; budget owners", "cost_center_code:code cost_center_name:name owner:person"),
        ("fiscal_period", "accounting periods; fiscal months", "period_name:code start_date:date end_date:date is_closed:bool"),
        ("journal_entry", "journal entries; postings", "period_id>fiscal_period entry_date:date description:text source:cat(AP|AR|payroll|manual) posted_by:person"),
        ("journal_line", "debit and credit lines; ledger lines", "entry_id>journal_entry account_id>account cost_center_id>cost_center debit:money credit:money"),
        ("budget", "budgets; planned spend", "account_id>account cost_center_id>cost_center period_id>fiscal_period budget_amount:money"),
        ("exchange_rate", "currency rates; FX rates", "currency_code:cat(USD|EUR|GBP|JPY|CHF) rate_date:date rate_to_base:num"),
    )),
    Domain("fleet_logistics", "log", "Logistics and transport: shipments, carriers, vehicles, drivers, routes and delivery stops.", (
        ("carrier", "shipping companies; hauliers", "carrier_name:name scac_code:code country:country on_time_rate:pct"),
        ("vehicle", "trucks; fleet vehicles", "plate_number:code vehicle_type:cat(van|box_truck|semi|refrigerated) capacity_kg:num year_built:int carrier_id>carrier"),
        ("driver", "drivers; truckers", "first_name:first last_name:last license_class:cat(B|C|CE) hired_on:date carrier_id>carrier"),
        ("route", "delivery routes; lanes", "origin_city:city destination_city:city distance_km:num planned_hours:num"),
        ("shipment", "consignments; shipments", "route_id>route vehicle_id>vehicle driver_id>driver shipped_at:ts delivered_at:ts weight_kg:num freight_cost:money status:cat(planned|in_transit|delivered|delayed)"),
        ("delivery_stop", "drop-offs; delivery stops", "shipment_id>shipment stop_sequence:qty city:city arrived_at:ts signed_by:person"),
        ("fuel_purchase", "fuel fill-ups; diesel purchases", "vehicle_id>vehicle purchased_on:date litres:num amount:money station_city:city"),
    )),
    Domain("marketing_campaigns", "mkt", "Marketing: campaigns, channels, ad spend, email sends, leads and conversions.", (
        ("channel", "marketing channels; media", "channel_name:cat(search|social|email|display|affiliate) is_paid:bool"),
        ("campaign", "campaigns; marketing pushes", "campaign_name:name channel_id>channel start_date:date end_date:date budget:money objective:cat(awareness|leads|sales|retention)"),
        ("ad_spend", "advertising costs; media spend", "campaign_id>campaign spend_date:date impressions:qty clicks:qty cost:money"),
        ("email_send", "newsletters sent; email blasts", "campaign_id>campaign sent_at:ts recipients:qty opens:qty unsubscribes:qty"),
        ("lead", "prospects; sales leads", "campaign_id>campaign email:email company:name source:cat(webinar|form|event|referral) score:num created_at:ts"),
        ("conversion", "conversions; signups from campaigns", "lead_id>lead converted_at:ts revenue:money conversion_type:cat(trial|purchase|demo)"),
    )),
    Domain("customer_support", "sup", "Customer support desk: tickets, agents, queues, replies, SLAs and satisfaction surveys.", (
        ("agent", "support agents; helpdesk staff", "agent_name:person team:cat(tier_1|tier_2|billing|technical) hired_on:date"),
        ("queue", "ticket queues; support queues", "queue_name:cat(general|billing|outage|vip) sla_hours:qty"),
        ("ticket", "support tickets; customer complaints; cases", "queue_id>queue agent_id>agent opened_at:ts closed_at:ts priority:cat(low|normal|high|urgent) status:cat(open|pending|solved|closed) subject:text"),
        ("ticket_reply", "responses; replies to customers", "ticket_id>ticket agent_id>agent sent_at:ts is_public:bool body:text"),
        ("satisfaction_survey", "CSAT ratings; customer satisfaction scores", "ticket_id>ticket score:qty comment:text answered_at:ts"),
        ("sla_breach", "missed SLAs; SLA violations", "ticket_id>ticket breach_type:cat(first_response|resolution) minutes_late:qty"),
    )),
    Domain("manufacturing_mes", "mfg", "Manufacturing execution: plants, production lines, work orders, machines, downtime, quality inspections and scrap.", (
        ("plant", "factories; plants", "plant_name:name city:city country:country"),
        ("production_line", "assembly lines; production lines", "plant_id>plant line_name:code shift_pattern:cat(2x8|3x8|4x12)"),
        ("machine", "machines; equipment", "line_id>production_line machine_type:cat(CNC|press|robot|oven|packer) manufacturer:name installed_on:date"),
        ("work_order", "production orders; jobs on the shop floor", "line_id>production_line product_code:code planned_qty:qty produced_qty:qty started_at:ts finished_at:ts"),
        ("downtime_event", "machine stoppages; downtime", "machine_id>machine started_at:ts duration_minutes:qty cause:cat(breakdown|changeover|material_shortage|maintenance)"),
        ("quality_inspection", "quality checks; inspections", "work_order_id>work_order inspected_at:ts sample_size:qty defects_found:qty passed:bool"),
        ("scrap_record", "scrapped parts; waste", "work_order_id>work_order scrap_qty:qty scrap_reason:cat(dimension|surface|assembly|material) cost:money"),
        ("maintenance_task", "repairs; maintenance jobs", "machine_id>machine scheduled_on:date completed_on:date technician:person labour_hours:num"),
    )),
    Domain("hospital_ehr", "ehr", "Hospital records: patients, admissions, wards, physicians, diagnoses, procedures, prescriptions and lab results.", (
        ("patient", "patients; people treated", "first_name:first last_name:last birth_date:date sex:cat(F|M) blood_type:cat(A+|A-|B+|O+|O-|AB+) city:city"),
        ("physician", "doctors; physicians", "full_name:person specialty:cat(cardiology|oncology|pediatrics|surgery|neurology) license_number:code"),
        ("ward", "wards; hospital units", "ward_name:cat(ICU|maternity|cardiac|general|pediatric) floor:int bed_count:qty"),
        ("admission", "hospital stays; admissions", "patient_id>patient ward_id>ward physician_id>physician admitted_at:ts discharged_at:ts admission_type:cat(emergency|elective|transfer) total_charge:money"),
        ("diagnosis", "diagnoses; medical conditions", "admission_id>admission icd10_code:code description:text is_primary:bool"),
        ("procedure_performed", "surgeries and procedures; operations", "admission_id>admission physician_id>physician procedure_code:code performed_at:ts duration_minutes:qty"),
        ("prescription", "prescribed drugs; medication orders", "admission_id>admission drug_name:cat(amoxicillin|ibuprofen|metformin|atorvastatin|insulin) dose_mg:num frequency:cat(daily|twice_daily|as_needed) prescribed_at:ts"),
        ("lab_result", "blood tests; lab results", "admission_id>admission test_name:cat(glucose|hemoglobin|creatinine|cholesterol) result_value:num unit:cat(mg/dL|g/dL|mmol/L) collected_at:ts abnormal:bool"),
        ("vital_sign", "vitals; blood pressure readings", "admission_id>admission measured_at:ts heart_rate:qty systolic_bp:qty diastolic_bp:qty temperature_c:num"),
    )),
    Domain("university_sis", "edu", "University student information: students, programs, courses, sections, enrollments, grades, instructors and tuition.", (
        ("faculty_department", "academic departments; schools of the university", "department_name:cat(Mathematics|History|Biology|Computer_Science|Economics) building:name"),
        ("instructor", "professors; lecturers", "full_name:person department_id>faculty_department academic_rank:cat(assistant|associate|full|adjunct) hired_on:date"),
        ("program", "degree programs; majors", "program_name:name degree:cat(BSc|BA|MSc|PhD) department_id>faculty_department credits_required:qty"),
        ("student", "students; undergraduates", "first_name:first last_name:last program_id>program enrolled_on:date gpa:num nationality:country"),
        ("course", "courses; classes offered", "course_code:code title:name credits:qty department_id>faculty_department"),
        ("section", "class sections; course sections", "course_id>course instructor_id>instructor term:cat(fall_2023|spring_2024|summer_2024) room:code capacity:qty"),
        ("enrollment", "course registrations; enrollments", "student_id>student section_id>section enrolled_at:ts final_grade:cat(A|B|C|D|F) grade_points:num"),
        ("tuition_invoice", "tuition bills; fees charged", "student_id>student term:cat(fall_2023|spring_2024) amount_due:money amount_paid:money due_date:date"),
        ("scholarship", "scholarships; financial aid awards", "student_id>student award_name:name amount:money awarded_on:date"),
    )),
    Domain("real_estate", "re", "Real estate agency: properties, listings, agents, viewings, offers and closed sales.", (
        ("property", "houses and apartments; homes", "address:text city:city property_type:cat(house|apartment|condo|townhouse) bedrooms:qty square_meters:num year_built:int"),
        ("realtor", "real estate agents; brokers", "full_name:person agency:name commission_rate:pct"),
        ("listing", "listings; homes for sale", "property_id>property realtor_id>realtor listed_on:date asking_price:money status:cat(active|pending|sold|withdrawn)"),
        ("viewing", "showings; house tours", "listing_id>listing viewed_at:ts buyer_name:person feedback:cat(positive|neutral|negative)"),
        ("offer", "bids; purchase offers", "listing_id>listing offer_amount:money offered_on:date accepted:bool"),
        ("closing", "completed home sales; closings", "listing_id>listing closed_on:date sale_price:money buyer_name:person"),
    )),
    Domain("hotel_bookings", "hot", "Hotel operations: hotels, rooms, guests, reservations, housekeeping and minibar charges.", (
        ("hotel", "hotels; resorts", "hotel_name:name city:city star_rating:qty"),
        ("room", "rooms; suites", "hotel_id>hotel room_number:code room_type:cat(single|double|suite|family) nightly_rate:money"),
        ("guest", "guests; visitors staying with us", "first_name:first last_name:last email:email country:country loyalty_member:bool"),
        ("reservation", "bookings; room reservations", "guest_id>guest room_id>room check_in:date check_out:date nights:qty booked_via:cat(website|OTA|phone|walk_in) total_price:money cancelled:bool"),
        ("housekeeping_task", "room cleanings; housekeeping jobs", "room_id>room cleaned_at:ts attendant:person minutes_spent:qty"),
        ("minibar_charge", "minibar purchases; in-room extras", "reservation_id>reservation item:cat(water|snacks|wine|beer) amount:money charged_at:ts"),
    )),
    Domain("airline_ops", "air", "Airline operations: airports, aircraft, flights, crew, passenger bookings and delays.", (
        ("airport", "airports; hubs", "iata_code:code airport_name:name city:city country:country"),
        ("aircraft", "planes; the aircraft fleet", "tail_number:code model:cat(A320|B737|A350|B787|E190) seats:qty delivered_on:date"),
        ("flight", "flights; departures", "flight_number:code origin_airport_id>airport destination_airport_id>airport aircraft_id>aircraft scheduled_departure:ts actual_departure:ts status:cat(on_time|delayed|cancelled|diverted)"),
        ("crew_member", "pilots and cabin crew; crew", "full_name:person crew_role:cat(captain|first_officer|flight_attendant|purser) base_airport_id>airport"),
        ("crew_assignment", "crew rosters; duty assignments", "flight_id>flight crew_member_id>crew_member duty_hours:num"),
        ("passenger_booking", "airline tickets sold; passenger bookings", "flight_id>flight passenger_name:person fare_class:cat(economy|premium|business|first) fare_paid:money checked_bags:qty"),
        ("flight_delay", "delays; late departures", "flight_id>flight delay_minutes:qty delay_cause:cat(weather|technical|crew|air_traffic_control)"),
    )),
    Domain("insurance_claims", "ins", "Insurance: policyholders, policies, premiums, claims, adjusters and payouts.", (
        ("policyholder", "insured customers; policyholders", "full_name:person birth_date:date city:city risk_segment:cat(low|medium|high)"),
        ("policy", "insurance policies; coverage contracts", "policyholder_id>policyholder product_line:cat(auto|home|life|travel|health) start_date:date end_date:date sum_insured:money"),
        ("premium_payment", "premiums paid; premium installments", "policy_id>policy paid_on:date amount:money method:cat(card|direct_debit|transfer)"),
        ("adjuster", "claims adjusters; loss assessors", "full_name:person region:cat(north|south|east|west) years_experience:qty"),
        ("claim", "insurance claims; loss reports", "policy_id>policy adjuster_id>adjuster incident_date:date reported_on:date claim_type:cat(collision|theft|fire|water_damage|illness) claimed_amount:money status:cat(open|approved|denied|paid)"),
        ("claim_payout", "settlements; claim payouts", "claim_id>claim paid_on:date payout_amount:money"),
        ("fraud_flag", "suspected fraud; fraud alerts", "claim_id>claim rule_name:cat(duplicate_claim|early_claim|high_amount) flagged_at:ts confirmed:bool"),
    )),
    Domain("banking_core", "bank", "Retail banking: customers, accounts, transactions, cards, loans and branches.", (
        ("branch", "bank branches; offices", "branch_name:name city:city opened_on:date"),
        ("bank_customer", "account holders; bank clients", "full_name:person birth_date:date segment:cat(mass|affluent|private|business) branch_id>branch"),
        ("deposit_account", "checking and savings accounts; bank accounts", "customer_id>bank_customer account_type:cat(checking|savings|term_deposit) opened_on:date balance:money interest_rate:pct"),
        ("account_transaction", "transactions; deposits and withdrawals", "account_id>deposit_account posted_at:ts amount:money transaction_type:cat(deposit|withdrawal|transfer|fee) channel:cat(ATM|branch|online|mobile)"),
        ("card", "debit and credit cards; cards", "account_id>deposit_account card_type:cat(debit|credit) issued_on:date expires_on:date credit_limit:money"),
        ("loan", "loans; mortgages", "customer_id>bank_customer loan_type:cat(mortgage|personal|auto|business) principal:money interest_rate:pct start_date:date term_months:qty"),
        ("loan_repayment", "loan installments; repayments", "loan_id>loan due_date:date paid_on:date amount_paid:money days_late:qty"),
    )),
    Domain("telecom_billing", "tel", "Telecom operator: subscribers, mobile plans, SIM lines, call records, data usage and monthly bills.", (
        ("subscriber", "subscribers; mobile customers", "full_name:person city:city joined_on:date segment:cat(prepaid|postpaid|business)"),
        ("tariff_plan", "mobile plans; tariffs", "plan_name:name monthly_fee:money data_allowance_gb:num minutes_included:qty"),
        ("sim_line", "phone lines; SIM cards", "subscriber_id>subscriber plan_id>tariff_plan msisdn:phone activated_on:date status:cat(active|suspended|ported_out)"),
        ("call_record", "phone calls; call detail records", "line_id>sim_line started_at:ts duration_seconds:qty call_type:cat(local|international|roaming) charge:money"),
        ("data_session", "mobile data usage; data sessions", "line_id>sim_line session_date:date megabytes:num roaming:bool"),
        ("monthly_bill", "phone bills; monthly statements", "subscriber_id>subscriber bill_month:date amount:money paid:bool"),
        ("network_outage", "network outages; network incidents", "region:cat(north|south|east|west) started_at:ts duration_minutes:qty affected_subscribers:qty"),
    )),
    Domain("energy_utility", "util", "Electric and gas utility: customers, meters, meter readings, tariffs, bills and outages.", (
        ("service_address", "premises; service addresses", "street:text city:city postal_code:code"),
        ("utility_customer", "utility customers; households", "full_name:person address_id>service_address moved_in:date"),
        ("meter", "meters; smart meters", "address_id>service_address meter_type:cat(electric|gas|water) installed_on:date serial_number:code"),
        ("meter_reading", "meter readings; consumption readings", "meter_id>meter read_at:ts kwh:num estimated:bool"),
        ("rate_schedule", "energy tariffs; rate schedules", "rate_name:name price_per_kwh:money standing_charge:money"),
        ("utility_bill", "energy bills; utility invoices", "customer_id>utility_customer rate_id>rate_schedule period_end:date consumption_kwh:num amount:money paid_on:date"),
        ("power_outage", "blackouts; power cuts", "address_id>service_address started_at:ts restored_at:ts cause:cat(storm|equipment_failure|planned_work)"),
    )),
    Domain("farm_agriculture", "agri", "Farm management: fields, crops, plantings, harvests, livestock, feed and fertilizer.", (
        ("field", "fields; plots of land", "field_name:name hectares:num soil_type:cat(clay|loam|sand|silt) irrigated:bool"),
        ("crop", "crops; plant varieties", "crop_name:cat(wheat|corn|soybean|barley|potato) variety:name days_to_maturity:qty"),
        ("planting", "sowings; plantings", "field_id>field crop_id>crop planted_on:date seed_kg:num"),
        ("harvest", "harvests; crop yields", "planting_id>planting harvested_on:date yield_tonnes:num moisture_pct:pct"),
        ("livestock_animal", "cattle and sheep; livestock", "tag_number:code species:cat(cattle|sheep|goat|pig) breed:name birth_date:date weight_kg:num"),
        ("feed_purchase", "animal feed bought; feed purchases", "feed_type:cat(hay|silage|grain|pellets) purchased_on:date tonnes:num cost:money"),
        ("fertilizer_application", "fertilizer use; spraying", "field_id>field applied_on:date product:cat(nitrogen|phosphate|potash|manure) kg_per_hectare:num"),
    )),
    Domain("restaurant_pos", "pos", "Restaurant point of sale: restaurants, menu items, tables, checks, check items, staff shifts and tips.", (
        ("restaurant", "restaurants; dining locations", "restaurant_name:name city:city seats:qty"),
        ("menu_item", "dishes; menu items", "item_name:name course:cat(starter|main|dessert|drink) price:money vegetarian:bool"),
        ("dining_table", "tables in the dining room; seating", "restaurant_id>restaurant table_number:qty seats:qty area:cat(terrace|main_room|bar)"),
        ("guest_check", "restaurant bills; tabs", "table_id>dining_table opened_at:ts closed_at:ts covers:qty total:money payment_method:cat(cash|card|voucher)"),
        ("check_item", "dishes ordered; items on bills", "check_id>guest_check menu_item_id>menu_item quantity:qty price:money"),
        ("staff_shift", "shifts worked; waiter shifts", "restaurant_id>restaurant staff_name:person staff_role:cat(waiter|chef|bartender|host) shift_date:date hours:num tips:money"),
    )),
    Domain("event_ticketing", "tix", "Event ticketing: venues, events, performers, ticket tiers, orders and check-ins.", (
        ("venue", "venues; arenas and theatres", "venue_name:name city:city capacity:qty"),
        ("performer", "artists on tour; performers; bands", "performer_name:name genre:cat(rock|pop|jazz|comedy|classical)"),
        ("event", "concerts and shows; events", "venue_id>venue performer_id>performer event_date:date doors_open:ts status:cat(on_sale|sold_out|cancelled)"),
        ("ticket_tier", "ticket categories; price tiers", "event_id>event tier_name:cat(general|VIP|balcony|floor) price:money allocation:qty"),
        ("ticket_order", "ticket purchases; ticket orders", "tier_id>ticket_tier buyer_email:email ordered_at:ts tickets:qty total_paid:money"),
        ("checkin", "entries at the door; scanned tickets", "order_id>ticket_order scanned_at:ts gate:code"),
    )),
    Domain("library_catalog", "lib", "Public library: books, authors, copies, members, loans, holds and fines.", (
        ("author", "writers; authors", "full_name:person birth_year:int nationality:country"),
        ("book", "titles; books", "title:name author_id>author isbn:code genre:cat(fiction|history|science|children|biography) published_year:int"),
        ("book_copy", "physical copies; library copies", "book_id>book branch:cat(central|north|riverside) acquired_on:date condition:cat(new|good|worn|damaged)"),
        ("library_member", "borrowers; library card holders", "full_name:person joined_on:date membership_type:cat(adult|child|senior|student)"),
        ("loan", "checkouts; borrowed books", "copy_id>book_copy member_id>library_member borrowed_on:date due_on:date returned_on:date"),
        ("hold", "reservations on books; holds", "book_id>book member_id>library_member placed_on:date fulfilled:bool"),
        ("fine", "overdue fines; late fees", "loan_id>loan amount:money paid:bool assessed_on:date"),
    )),
    Domain("fitness_club", "gym", "Fitness club: members, memberships, class schedules, bookings, trainers and check-ins.", (
        ("trainer", "personal trainers; coaches", "full_name:person specialty:cat(yoga|strength|cycling|pilates|HIIT) hourly_rate:money"),
        ("gym_member", "gym members; club members", "full_name:person birth_date:date joined_on:date home_club:cat(downtown|uptown|harbour)"),
        ("membership_plan", "membership types; membership plans", "plan_name:cat(basic|premium|off_peak|family) monthly_price:money"),
        ("membership", "gym subscriptions; memberships", "member_id>gym_member plan_id>membership_plan start_date:date end_date:date auto_renew:bool"),
        ("fitness_class", "workout classes; group classes", "trainer_id>trainer class_type:cat(yoga|spin|boxing|pilates) starts_at:ts capacity:qty"),
        ("class_booking", "class reservations; class bookings", "class_id>fitness_class member_id>gym_member booked_at:ts attended:bool"),
        ("gym_visit", "check-ins at the gym; gym visits", "member_id>gym_member entered_at:ts minutes_stayed:qty"),
    )),
    Domain("legal_practice", "law", "Law firm: clients, matters, attorneys, billable time entries, invoices and court hearings.", (
        ("law_client", "firm clients; legal clients", "client_name:name industry:cat(tech|retail|energy|healthcare) client_since:date"),
        ("attorney", "lawyers; attorneys", "full_name:person practice_area:cat(litigation|corporate|IP|employment|tax) hourly_rate:money partner:bool"),
        ("matter", "cases; legal matters", "client_id>law_client lead_attorney_id>attorney opened_on:date matter_type:cat(lawsuit|merger|patent|contract) status:cat(open|settled|closed|won|lost)"),
        ("time_entry", "billable hours; time entries", "matter_id>matter attorney_id>attorney worked_on:date hours:num narrative:text billable:bool"),
        ("legal_invoice", "legal bills; fee invoices", "matter_id>matter issued_on:date amount:money paid_on:date"),
        ("hearing", "court dates; hearings", "matter_id>matter court:name hearing_date:date outcome:cat(adjourned|ruled|settled)"),
    )),
    Domain("construction_projects", "con", "Construction: projects, sites, subcontractors, work packages, change orders, inspections and material deliveries.", (
        ("project", "building projects; construction projects", "project_name:name client:name budget:money start_date:date planned_end:date"),
        ("site", "job sites; construction sites", "project_id>project address:text city:city"),
        ("subcontractor", "subcontractors; trades", "company_name:name trade:cat(electrical|plumbing|concrete|roofing|HVAC) insured:bool"),
        ("work_package", "work packages; scopes of work", "project_id>project subcontractor_id>subcontractor description:text planned_cost:money actual_cost:money percent_complete:pct"),
        ("change_order", "change orders; scope changes", "project_id>project requested_on:date amount:money approved:bool reason:cat(design_change|site_condition|client_request)"),
        ("site_inspection", "safety inspections; site inspections", "site_id>site inspected_on:date inspector:person passed:bool issues_found:qty"),
        ("material_delivery", "material deliveries; supplies delivered", "site_id>site material:cat(concrete|steel|lumber|glass|brick) quantity:qty cost:money delivered_on:date"),
    )),
    Domain("clinical_trials", "ct", "Clinical research: trials, trial sites, participants, visits, adverse events and dosing.", (
        ("trial", "clinical studies; trials", "protocol_code:code title:name phase:cat(I|II|III|IV) sponsor:name start_date:date"),
        ("trial_site", "research sites; investigator sites", "trial_id>trial site_name:name country:country principal_investigator:person"),
        ("participant", "study subjects; volunteers", "site_id>trial_site enrolled_on:date age:qty sex:cat(F|M) arm:cat(placebo|low_dose|high_dose)"),
        ("study_visit", "study visits; follow-up appointments", "participant_id>participant visit_number:qty visit_date:date completed:bool"),
        ("adverse_event", "side effects; adverse events", "participant_id>participant onset_date:date severity:cat(mild|moderate|severe) serious:bool term:cat(headache|nausea|rash|fatigue)"),
        ("dose_administration", "doses given; dosing records", "participant_id>participant dosed_at:ts dose_mg:num route:cat(oral|IV|subcutaneous)"),
    )),
    Domain("pharmacy_retail", "rx", "Pharmacy chain: drugs, prescriptions filled, pharmacists, drug stock and insurance reimbursements.", (
        ("drug", "medicines; drugs", "brand_name:name generic_name:name form:cat(tablet|capsule|syrup|injection) strength_mg:num controlled:bool"),
        ("pharmacist", "pharmacists; dispensing staff", "full_name:person license_number:code store:cat(main_street|mall|airport)"),
        ("rx_customer", "pharmacy customers; people picking up medicine", "full_name:person birth_date:date insurer:cat(Aetna|Cigna|United|none)"),
        ("rx_fill", "filled prescriptions; dispensings", "customer_id>rx_customer drug_id>drug pharmacist_id>pharmacist filled_at:ts quantity:qty days_supply:qty copay:money"),
        ("drug_stock", "pharmacy stock; drug inventory", "drug_id>drug store:cat(main_street|mall|airport) on_hand:qty expiry_date:date"),
        ("rx_insurance_claim", "insurance reimbursements; pharmacy claims", "fill_id>rx_fill submitted_at:ts billed:money reimbursed:money status:cat(paid|rejected|pending)"),
    )),
    Domain("veterinary_clinic", "vet", "Veterinary clinic: pet owners, pets, vets, appointments, vaccinations and treatments.", (
        ("pet_owner", "pet owners; animal owners", "full_name:person phone:phone city:city"),
        ("pet", "animals; pets", "owner_id>pet_owner pet_name:name species:cat(dog|cat|rabbit|bird) breed:name birth_date:date weight_kg:num"),
        ("veterinarian", "vets; veterinarians", "full_name:person specialty:cat(general|surgery|dentistry|exotics)"),
        ("appointment", "vet visits; appointments", "pet_id>pet vet_id>veterinarian scheduled_at:ts reason:cat(checkup|injury|vaccination|dental) fee:money"),
        ("vaccination", "vaccines given; vaccinations", "pet_id>pet vaccine:cat(rabies|distemper|parvo|feline_leukemia) given_on:date next_due:date"),
        ("treatment", "treatments; medications for pets", "appointment_id>appointment treatment_name:name cost:money"),
    )),
    Domain("k12_school", "k12", "K-12 school district: schools, teachers, pupils, homerooms, attendance, test scores and bus routes.", (
        ("school", "schools in the district; campuses", "school_name:name level:cat(elementary|middle|high) district_zone:cat(north|south|central)"),
        ("teacher", "teachers; educators", "full_name:person school_id>school subject:cat(math|english|science|history|art) years_teaching:qty"),
        ("pupil", "pupils; schoolchildren; kids", "first_name:first last_name:last school_id>school grade_level:qty birth_date:date"),
        ("homeroom", "homerooms; class groups", "school_id>school teacher_id>teacher room:code grade_level:qty"),
        ("attendance", "attendance records; absences", "pupil_id>pupil school_day:date present:bool tardy:bool"),
        ("test_score", "exam results; standardized test scores", "pupil_id>pupil subject:cat(math|reading|science) score:num tested_on:date"),
        ("bus_route", "school buses; bus routes", "route_code:code driver:person capacity:qty"),
    )),
    Domain("ecommerce_web", "web", "E-commerce web analytics: sessions, page views, carts, checkouts and traffic sources.", (
        ("traffic_source", "referrers; traffic sources", "source_name:cat(google|facebook|newsletter|direct|tiktok) medium:cat(organic|cpc|email|referral)"),
        ("visitor", "site visitors; web users", "first_seen:ts country:country device:cat(mobile|desktop|tablet)"),
        ("web_session", "browsing sessions; visits to the site", "visitor_id>visitor source_id>traffic_source started_at:ts duration_seconds:qty bounced:bool"),
        ("page_view", "page views; pageviews", "session_id>web_session url_path:text viewed_at:ts time_on_page_seconds:qty"),
        ("cart", "shopping carts; baskets", "session_id>web_session created_at:ts items:qty cart_value:money abandoned:bool"),
        ("checkout", "completed checkouts; online purchases", "cart_id>cart completed_at:ts revenue:money coupon_used:bool"),
    )),
    Domain("saas_billing", "saas", "SaaS subscription billing: accounts, subscriptions, plans, invoices, payments, usage and churn.", (
        ("saas_account", "customer accounts; tenants", "company_name:name industry:cat(tech|finance|retail|education) country:country created_at:ts"),
        ("pricing_plan", "pricing tiers; plans", "plan_name:cat(starter|team|business|enterprise) monthly_price:money seats_included:qty"),
        ("subscription", "subscriptions; recurring contracts", "account_id>saas_account plan_id>pricing_plan started_on:date cancelled_on:date seats:qty mrr:money"),
        ("saas_invoice", "invoices; bills sent to customers", "account_id>saas_account issued_on:date amount:money status:cat(draft|open|paid|void)"),
        ("payment", "payments received; card charges", "invoice_id>saas_invoice paid_at:ts amount:money method:cat(card|ACH|wire) failed:bool"),
        ("usage_record", "product usage; API calls", "account_id>saas_account usage_date:date api_calls:qty active_users:qty storage_gb:num"),
        ("churn_event", "cancellations; churned customers", "account_id>saas_account churned_on:date reason:cat(price|missing_feature|competitor|closed_business)"),
    )),
    Domain("procurement", "proc", "Procurement: vendors, purchase requisitions, purchase orders, contracts and supplier invoices.", (
        ("vendor", "vendors; suppliers we buy from", "vendor_name:name country:country payment_terms:cat(net_30|net_60|prepaid) approved:bool"),
        ("requisition", "purchase requests; requisitions", "requested_by:person department:cat(IT|facilities|marketing|operations) requested_on:date estimated_cost:money status:cat(draft|approved|rejected)"),
        ("purchase_order", "purchase orders; POs", "vendor_id>vendor requisition_id>requisition ordered_on:date total:money currency:cat(USD|EUR|GBP)"),
        ("po_line", "PO lines; ordered items", "po_id>purchase_order item_description:text quantity:qty unit_price:money"),
        ("vendor_contract", "supplier agreements; vendor contracts", "vendor_id>vendor start_date:date end_date:date annual_value:money auto_renew:bool"),
        ("vendor_invoice", "supplier invoices; bills from vendors", "po_id>purchase_order invoice_date:date amount:money paid:bool"),
    )),
    Domain("recruiting_ats", "ats", "Recruiting: job openings, candidates, applications, interviews, offers and recruiters.", (
        ("recruiter", "recruiters; talent partners", "full_name:person team:cat(tech|sales|ops|executive)"),
        ("job_opening", "open positions; vacancies", "title:name department:cat(engineering|sales|finance|support) opened_on:date recruiter_id>recruiter salary_max:money remote:bool"),
        ("candidate", "candidates; applicants; job seekers", "full_name:person email:email source:cat(LinkedIn|referral|job_board|career_site) years_experience:qty"),
        ("application", "job applications; applications received", "candidate_id>candidate opening_id>job_opening applied_on:date stage:cat(screen|interview|offer|hired|rejected)"),
        ("interview", "interviews; interview rounds", "application_id>application interviewer:person interview_date:date score:qty format:cat(phone|onsite|video)"),
        ("job_offer", "offers extended; job offers", "application_id>application offered_on:date base_salary:money accepted:bool"),
    )),
    Domain("nonprofit_fundraising", "npo", "Nonprofit fundraising: donors, donations, appeals, pledges, grants and volunteers.", (
        ("donor", "donors; supporters", "full_name:person city:city first_gift_on:date donor_type:cat(individual|foundation|corporate)"),
        ("appeal", "fundraising appeals; drives", "appeal_name:name launched_on:date goal:money"),
        ("donation", "gifts; donations", "donor_id>donor appeal_id>appeal received_on:date amount:money recurring:bool"),
        ("pledge", "pledges; promised gifts", "donor_id>donor pledged_on:date pledged_amount:money fulfilled_amount:money"),
        ("grant_award", "grants received; foundation grants", "funder:name awarded_on:date amount:money program_area:cat(education|health|environment)"),
        ("volunteer", "volunteers; helpers", "full_name:person signed_up_on:date hours_logged:num"),
    )),
    Domain("car_rental", "car", "Car rental: branches, vehicles, customers, rentals, damages and maintenance.", (
        ("rental_branch", "rental locations; rental counters", "branch_name:name city:city airport:bool"),
        ("rental_car", "rental cars; cars we rent out", "branch_id>rental_branch make:cat(Toyota|Ford|VW|BMW|Kia) model:name car_class:cat(economy|compact|SUV|luxury) mileage_km:qty"),
        ("renter", "renters; people renting cars", "full_name:person license_country:country birth_date:date"),
        ("rental_agreement", "rentals; car hires", "car_id>rental_car renter_id>renter pickup_at:ts return_at:ts daily_rate:money total_charged:money"),
        ("damage_report", "damages; dents and scratches", "rental_id>rental_agreement reported_on:date severity:cat(minor|moderate|major) repair_cost:money"),
        ("service_visit", "car servicing; maintenance visits", "car_id>rental_car serviced_on:date service_type:cat(oil_change|tyres|brakes|inspection) cost:money"),
    )),
    Domain("music_streaming", "mus", "Music streaming: artists, albums, tracks, listeners, plays, playlists and royalties.", (
        ("artist", "artists; musicians", "artist_name:name genre:cat(pop|rock|hip_hop|electronic|jazz) country:country"),
        ("album", "albums; records", "artist_id>artist album_title:name release_date:date label:name"),
        ("track", "songs; tracks", "album_id>album track_title:name duration_seconds:qty explicit:bool"),
        ("listener", "listeners; streaming users", "username:code country:country subscription:cat(free|premium|family|student) signed_up:date"),
        ("play_event", "streams; plays", "track_id>track listener_id>listener played_at:ts seconds_played:qty skipped:bool"),
        ("playlist", "playlists; curated mixes", "listener_id>listener playlist_name:name followers:qty"),
        ("royalty_payment", "royalties; payouts to artists", "artist_id>artist period:date amount:money streams:qty"),
    )),
    Domain("sports_league", "spt", "Sports league: teams, players, matches, goals, injuries and attendance.", (
        ("team", "teams; clubs", "team_name:name city:city founded:int"),
        ("player", "players; athletes", "team_id>team full_name:person position:cat(goalkeeper|defender|midfielder|forward) birth_date:date salary:money"),
        ("match", "games; fixtures", "home_team_id>team away_team_id>team played_on:date home_score:qty away_score:qty attendance:qty"),
        ("goal", "goals scored; goals", "match_id>match player_id>player minute:qty penalty:bool"),
        ("injury", "injuries; injured players", "player_id>player injured_on:date injury_type:cat(hamstring|knee|ankle|concussion) games_missed:qty"),
    )),
)

#: Sibling databases: each covers much of one domain above (`SIBLING_OF`) under other names and another shape, as
#: two databases of one company do (an airline's operations beside a travel agency's bookings). Routing must tell
#: each from its sibling by what only one of them holds.
SIBLINGS: tuple[Domain, ...] = (
    Domain("travel_agency", "trv", "Travel agency: travellers, trip itineraries, flight segments, fare rules, seat choices and refunds.", (
        ("traveller", "travellers; clients of the agency", "full_name:person home_country:country frequent_flyer_tier:cat(none|silver|gold|platinum) date_of_birth:date"),
        ("itinerary", "trips; itineraries", "traveller_id>traveller booked_on:date trip_purpose:cat(business|leisure|family) total_fare:money status:cat(confirmed|ticketed|cancelled|refunded)"),
        ("flight_segment", "flight legs; segments", "itinerary_id>itinerary carrier_code:code flight_no:code depart_city:city arrive_city:city departs_at:ts cabin:cat(economy|premium|business|first)"),
        ("seat_choice", "seat selections; seats chosen", "segment_id>flight_segment seat_label:code extra_legroom:bool seat_fee:money"),
        ("fare_rule", "fare rules; fare conditions", "fare_basis:code refundable:bool change_fee:money baggage_allowance_kg:qty"),
        ("trip_refund", "refunds; money returned to travellers", "itinerary_id>itinerary refunded_on:date refund_amount:money reason:cat(schedule_change|illness|voluntary|cancelled_flight)"),
    )),
    Domain("admissions_office", "adm", "University admissions: applicants, applications to degree programs, entrance exams, interviews, offers and enrolment deposits.", (
        ("applicant", "applicants; prospective students", "first_name:first last_name:last home_country:country high_school_gpa:num birth_date:date"),
        ("degree_program", "degree programs; programs applied to", "program_title:name faculty:cat(Science|Arts|Engineering|Business|Medicine) intake_capacity:qty"),
        ("application", "applications; admission files", "applicant_id>applicant program_id>degree_program submitted_on:date decision:cat(pending|admitted|waitlisted|rejected) application_fee:money"),
        ("entrance_exam", "entrance exams; test scores", "applicant_id>applicant exam_name:cat(SAT|ACT|GRE|GMAT) score:qty taken_on:date"),
        ("admission_interview", "admission interviews; interviews", "application_id>application interviewer:person interviewed_on:date rating:qty"),
        ("enrolment_deposit", "enrolment deposits; seat deposits", "application_id>application paid_on:date deposit_amount:money"),
    )),
    Domain("car_dealership", "dlr", "Car dealership: showrooms, cars for sale, buyers, sales deals, trade-ins, financing and test drives.", (
        ("showroom", "showrooms; dealerships", "showroom_name:name city:city"),
        ("vehicle_for_sale", "cars for sale; vehicles in stock", "showroom_id>showroom make:cat(Toyota|Ford|VW|BMW|Kia) model:name model_year:int sticker_price:money condition:cat(new|used|certified)"),
        ("buyer", "buyers; car buyers", "full_name:person city:city email:email"),
        ("sales_deal", "car sales; deals closed", "vehicle_id>vehicle_for_sale buyer_id>buyer salesperson:person sold_on:date sale_price:money"),
        ("trade_in", "trade-ins; cars traded in", "deal_id>sales_deal make:cat(Toyota|Ford|VW|BMW|Kia) model:name appraised_value:money"),
        ("financing_contract", "car loans; financing contracts", "deal_id>sales_deal lender:name apr_pct:pct term_months:qty monthly_payment:money"),
        ("test_drive", "test drives; drives booked", "vehicle_id>vehicle_for_sale buyer_id>buyer driven_at:ts duration_minutes:qty"),
    )),
    Domain("outpatient_clinic", "opc", "Outpatient clinic: patients, doctors, appointments, referrals and insurance claims billed.", (
        ("clinic_patient", "patients; people seen at the clinic", "full_name:person birth_date:date insurance_provider:cat(Aetna|Cigna|Medicare|none) city:city"),
        ("doctor", "doctors; clinicians", "full_name:person specialty:cat(family_medicine|dermatology|cardiology|pediatrics)"),
        ("appointment", "appointments; visits", "patient_id>clinic_patient doctor_id>doctor scheduled_at:ts visit_reason:cat(checkup|follow_up|acute|vaccination) no_show:bool copay:money"),
        ("referral", "referrals; specialist referrals", "appointment_id>appointment referred_to:cat(radiology|physiotherapy|cardiology|surgery) referred_on:date urgent:bool"),
        ("clinic_claim", "insurance claims billed; claims", "appointment_id>appointment billed_amount:money paid_amount:money claim_status:cat(submitted|paid|denied)"),
    )),
    Domain("podcast_network", "pod", "Podcast network: shows, episodes, hosts, listeners, downloads and sponsorship deals.", (
        ("podcast_show", "podcasts; shows", "show_title:name category:cat(news|comedy|true_crime|business|sports) launched_on:date"),
        ("show_host", "hosts; presenters", "full_name:person show_id>podcast_show"),
        ("episode", "episodes; podcast episodes", "show_id>podcast_show episode_title:name published_on:date duration_minutes:qty explicit:bool"),
        ("podcast_listener", "listeners; podcast subscribers", "username:code country:country app:cat(apple|spotify|web|android)"),
        ("episode_download", "downloads; episode downloads", "episode_id>episode listener_id>podcast_listener downloaded_at:ts completed:bool"),
        ("sponsorship", "sponsors; sponsorship deals", "show_id>podcast_show sponsor_name:name cpm_rate:money starts_on:date impressions:qty"),
    )),
    Domain("it_service_desk", "itsd", "Internal IT service desk: staff incidents, IT assets, technicians and change requests.", (
        ("staff_member", "staff; employees who report problems", "full_name:person department:cat(Finance|Sales|Engineering|HR) office_city:city"),
        ("technician", "technicians; IT engineers", "full_name:person tier:cat(L1|L2|L3)"),
        ("it_asset", "laptops and devices; IT assets", "asset_tag:code asset_type:cat(laptop|monitor|phone|server) assigned_to_id>staff_member purchased_on:date purchase_cost:money"),
        ("incident", "incidents; IT outages and faults", "reported_by_id>staff_member technician_id>technician asset_id>it_asset opened_at:ts resolved_at:ts severity:cat(sev1|sev2|sev3|sev4) category:cat(network|hardware|software|access)"),
        ("change_request", "change requests; planned changes", "technician_id>technician planned_for:ts risk:cat(low|medium|high) approved:bool"),
    )),
    Domain("vacation_rentals", "vr", "Vacation rentals marketplace: hosts, rental homes, guests' stays, reviews and host payouts.", (
        ("host", "hosts; home owners renting out", "full_name:person superhost:bool joined_on:date"),
        ("rental_home", "rental homes; cabins and villas", "host_id>host city:city home_type:cat(cabin|apartment|villa|cottage) bedrooms:qty nightly_price:money"),
        ("stay", "stays; trips booked by guests", "home_id>rental_home guest_name:person arrives_on:date departs_on:date nights:qty total_paid:money cancelled:bool"),
        ("stay_review", "reviews; guest ratings", "stay_id>stay stars:qty cleanliness:qty written_on:date"),
        ("host_payout", "host payouts; money paid to hosts", "host_id>host paid_on:date payout_amount:money"),
    )),
    Domain("fantasy_sports", "fan", "Fantasy sports game: managers, fantasy teams, drafted players, gameweek points and mini-leagues.", (
        ("manager", "managers; fantasy players", "username:code country:country joined_on:date"),
        ("fantasy_team", "fantasy teams; squads", "manager_id>manager team_name:name budget_left:money"),
        ("drafted_player", "drafted players; picks", "fantasy_team_id>fantasy_team player_name:person real_club:name position:cat(goalkeeper|defender|midfielder|forward) price:money"),
        ("gameweek_score", "gameweek points; weekly scores", "fantasy_team_id>fantasy_team week:qty points:qty transfers_made:qty"),
        ("mini_league", "mini-leagues; private leagues", "league_name:name entry_fee:money members:qty"),
    )),
)
#: The domain each sibling overlaps.
SIBLING_OF = {"travel_agency": "airline_ops", "admissions_office": "university_sis", "car_dealership": "car_rental",
              "outpatient_clinic": "hospital_ehr", "podcast_network": "music_streaming",
              "it_service_desk": "customer_support", "vacation_rentals": "hotel_bookings",
              "fantasy_sports": "sports_league"}
#: Databases of the extended test bed written without a PRIMARY KEY or REFERENCES (the rows are the same).
KEYLESS = ("library_catalog", "fitness_club", "legal_practice", "podcast_network", "vacation_rentals")


# --- columns, tables, databases ------------------------------------------------------------------

SQL_TYPES = {
    "pk": "INTEGER", "fk": "INTEGER", "int": "INTEGER", "qty": "INTEGER", "money": "DECIMAL(12,2)",
    "pct": "DECIMAL(5,2)", "num": "REAL", "date": "DATE", "ts": "TIMESTAMP", "bool": "BOOLEAN",
    "first": "VARCHAR(40)", "last": "VARCHAR(40)", "person": "VARCHAR(80)", "name": "VARCHAR(80)",
    "email": "VARCHAR(120)", "phone": "VARCHAR(20)", "code": "VARCHAR(20)", "text": "TEXT",
    "city": "VARCHAR(60)", "country": "VARCHAR(60)", "cat": "VARCHAR(30)",
}
MEASURES = ("money", "qty", "num", "pct")
#: Columns every kind of table may carry (audit, integration, soft delete, …): padding up to the width.
PADDING = (
    "created_at:ts updated_at:ts created_by:person updated_by:person is_deleted:bool "
    "source_system:cat(SAP|Salesforce|legacy|manual) external_ref:code notes:text row_version:int tenant_id:int "
    "region_code:cat(EMEA|APAC|AMER) currency_code:cat(USD|EUR|GBP) sync_status:cat(pending|synced|error) "
    "valid_from:date valid_to:date import_batch_id:int owner_email:email legacy_id:code data_quality_score:num "
    "is_active:bool approved_by:person approved_at:ts comments:text priority_rank:int"
)
#: Satellite tables derived from an entity: (suffix, columns; `{e}` is the entity).
DERIVED = (
    ("status_history", "{e}_id>{e} old_status:cat(new|active|on_hold|closed) new_status:cat(new|active|on_hold|closed) changed_at:ts changed_by:person reason:text"),
    ("note", "{e}_id>{e} author:person written_at:ts body:text is_internal:bool"),
    ("audit_log", "{e}_id>{e} action:cat(insert|update|delete) field_name:code old_value:text new_value:text changed_at:ts changed_by:person"),
    ("attachment", "{e}_id>{e} file_name:code mime_type:cat(application/pdf|image/png|text/csv) size_bytes:qty uploaded_at:ts uploaded_by:person"),
    ("type", "type_code:code label:name description:text sort_order:int"),
    ("tag", "{e}_id>{e} tag:cat(urgent|vip|review|legacy) tagged_at:ts tagged_by:person"),
    ("daily_summary", "summary_date:date record_count:qty total_value:money avg_value:num min_value:num max_value:num"),
    ("archive", "archived_at:ts archived_by:person"),
)


@dataclass(frozen=True)
class Column:
    """One column: its name, kind (see SQL_TYPES), categorical values, referenced table."""

    name: str
    kind: str
    values: tuple[str, ...] = ()
    ref: str | None = None

    @property
    def sql_type(self) -> str:
        """The declared type (the same spelling works in SQLite and PostgreSQL)."""
        return SQL_TYPES[self.kind]


@dataclass(frozen=True)
class Table:
    """One generated table; `phrases` are its everyday names (core entities only), `rows` its data."""

    name: str
    columns: tuple[Column, ...]
    phrases: tuple[str, ...] = ()
    rows: tuple[tuple[object, ...], ...] = ()

    @property
    def pk(self) -> str:
        """The primary key column."""
        return self.columns[0].name


@dataclass
class Database:
    """A test-bed database: tables, a description, sample questions (for the index) and held-out ones; `keys`
    False when it is written without declared keys."""

    name: str
    description: str
    tables: list[Table]
    sample_questions: list[str] = field(default_factory=list)
    test_questions: list[str] = field(default_factory=list)
    keys: bool = True


def _rng(seed: int, *parts: object) -> random.Random:
    return random.Random(zlib.crc32("\x1f".join(map(str, (seed, *parts))).encode()))


def parse_columns(spec: str) -> list[Column]:
    """`name:kind`, `name:cat(a|b)` and `name>table` items, space-separated."""
    out = []
    for item in spec.split():
        if ">" in item:
            name, ref = item.split(">")
            out.append(Column(name, "fk", ref=ref))
            continue
        name, kind = item.split(":", 1)
        if kind.startswith("cat("):
            values = tuple(v.replace("_", " ") for v in kind[4:-1].split("|"))
            out.append(Column(name, "cat", values))
        else:
            out.append(Column(name, kind))
    return out


PADDING_COLUMNS = parse_columns(PADDING)


def _width(rng: random.Random, width: tuple[int, int]) -> int:
    """A width in the range, skewed towards wide tables (as real warehouses are)."""
    return min(width[1], width[0] + int((width[1] - width[0] + 1) * rng.random() ** 0.7))


def _pad(columns: list[Column], width: int, rng: random.Random) -> list[Column]:
    taken = {c.name for c in columns}
    extra = [c for c in PADDING_COLUMNS if c.name not in taken]
    rng.shuffle(extra)
    return columns + extra[:max(0, width - len(columns))]


# --- values --------------------------------------------------------------------------------------

FIRST = ("Ana", "Ben", "Chloe", "David", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kofi", "Lena")
LAST = ("Garcia", "Smith", "Nguyen", "Okafor", "Muller", "Rossi", "Kowalski", "Tanaka", "Silva", "Dubois")
CITIES = ("Lyon", "Austin", "Osaka", "Leeds", "Porto", "Denver", "Gdansk", "Perth", "Tampa", "Bergen", "Quito")
COUNTRIES = ("France", "USA", "Japan", "UK", "Portugal", "Poland", "Australia", "Norway", "Ecuador", "Kenya")
ADJ = ("Northern", "Blue", "Prime", "Golden", "Urban", "Summit", "Coastal", "Green", "Silver", "Atlas")
NOUN = ("Works", "Partners", "Group", "Line", "Point", "Hub", "Labs", "Center", "Collective", "Trading")
WORDS = ("routine", "follow up", "escalated", "customer asked", "pending review", "see attached", "urgent fix")


def _value(col: Column, row: int, rng: random.Random, parent_rows: dict[str, int]) -> object:
    kind = col.kind
    if kind == "pk":
        return row + 1
    if kind == "fk":
        return rng.randint(1, max(1, parent_rows.get(col.ref or "", 1)))
    if rng.random() < 0.08 and kind not in ("cat", "bool"):
        return None
    day = f"202{rng.randint(2, 4)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    return {
        "int": lambda: rng.randint(1, 2024), "qty": lambda: rng.randint(0, 120),
        "money": lambda: round(rng.uniform(5, 5000), 2), "pct": lambda: round(rng.uniform(0, 40), 2),
        "num": lambda: round(rng.uniform(0, 900), 2), "date": lambda: day,
        "ts": lambda: f"{day} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00",
        "bool": lambda: rng.random() < 0.5, "first": lambda: rng.choice(FIRST), "last": lambda: rng.choice(LAST),
        "person": lambda: f"{rng.choice(FIRST)} {rng.choice(LAST)}", "name": lambda: f"{rng.choice(ADJ)} {rng.choice(NOUN)}",
        "email": lambda: f"{rng.choice(FIRST).lower()}.{rng.choice(LAST).lower()}@example.com",
        "phone": lambda: f"+1-555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
        "code": lambda: f"{col.name[:3].upper()}-{rng.randint(1, 9999):04d}", "text": lambda: rng.choice(WORDS),
        "city": lambda: rng.choice(CITIES), "country": lambda: rng.choice(COUNTRIES),
        "cat": lambda: rng.choice(col.values),
    }[kind]()


def _with_rows(tables: list[Table], seed: int, rows: tuple[int, int]) -> list[Table]:
    """Fill each table with a few rows (tables come parents first, so foreign keys point at real rows)."""
    counts = {t.name: _rng(seed, "rows", t.name).randint(*rows) for t in tables}
    out = []
    for table in tables:
        rng = _rng(seed, "rows", table.name)
        n = rng.randint(*rows)
        data = tuple(tuple(_value(c, i, rng, counts) for c in table.columns) for i in range(n))
        out.append(Table(table.name, table.columns, table.phrases, data))
    return out


# --- building tables from a domain ---------------------------------------------------------------


def _entity_tables(domain: Domain, entities: list[tuple[str, str, str]], seed: int, width: tuple[int, int],
                   rename: dict[str, str]) -> list[Table]:
    out = []
    for entity, phrases, spec in entities:
        rng = _rng(seed, "entity", domain.name, entity)
        columns = [Column(f"{entity}_id", "pk")]
        for col in parse_columns(spec):
            if col.kind == "fk":
                if col.ref not in rename:
                    continue  # the referenced entity is not in this database
                col = Column(col.name, "fk", ref=rename[col.ref])
            columns.append(col)
        columns = _pad(columns, _width(rng, width), rng)
        out.append(Table(rename[entity], tuple(columns), tuple(p.strip() for p in phrases.split(";"))))
    return out


def _derived_table(domain: Domain, entity: str, suffix: str, spec: str, seed: int, width: tuple[int, int],
                   rename: dict[str, str], base: Table) -> Table:
    rng = _rng(seed, "derived", domain.name, entity, suffix)
    name = f"{entity}_{suffix}"
    columns = [Column(f"{name}_id", "pk")]
    if suffix == "archive":  # an archive keeps the entity's own columns (without constraints)
        columns += [Column(c.name, "int" if c.kind in ("pk", "fk") else c.kind, c.values) for c in base.columns]
    for col in parse_columns(spec.replace("{e}", entity)):
        columns.append(Column(col.name, "fk", ref=rename[col.ref]) if col.kind == "fk" else col)
    columns = _pad(columns, _width(rng, width), rng)[:width[1]]
    return Table(rename.get(name, name), tuple(columns))


def domain_tables(domain: Domain, size: int, seed: int, *, width: tuple[int, int] = (8, 20),
                  prefixed: bool = False) -> list[Table]:
    """`size` tables of one domain: its core entities first (all of them when size allows), then satellites."""
    core = list(domain.entities[:size])

    def named(entity: str) -> str:
        if not prefixed or entity.startswith(domain.prefix + "_"):
            return entity
        return f"{domain.prefix}_{entity}"

    rename = {e: named(e) for e, _, _ in core}
    tables = _entity_tables(domain, core, seed, width, rename)
    by_entity = {e: t for (e, _, _), t in zip(core, tables, strict=True)}
    for suffix, spec in DERIVED:
        for entity, _, _ in core:
            if len(tables) >= size:
                break
            derived = _derived_table(domain, entity, suffix, spec, seed, width,
                                     {**rename, f"{entity}_{suffix}": named(f"{entity}_{suffix}")}, by_entity[entity])
            tables.append(derived)
    return tables[:size]


#: Regional copies of every domain, for a wide schema larger than one copy of the domains holds (2,160 tables):
#: warehouses keep one schema per region or tenant (`sales_emea_customer` beside `sales_customer`).
REGIONS = ("emea", "apac", "amer", "latam", "nordics", "dach", "iberia", "benelux", "anz", "india", "gulf", "andes")


def wide_schema(n_tables: int = 1200, seed: int = 42, *, rows: tuple[int, int] = (3, 6)) -> list[Table]:
    """One database of `n_tables` tables from every domain (names prefixed by domain), parents first; beyond
    2,160 tables, regional copies of the domains (`REGIONS`)."""
    one_copy = sum(len(d.entities) for d in DOMAINS) * (1 + len(DERIVED))
    copies = max(1, -(-n_tables // one_copy))
    if copies > 1 + len(REGIONS):
        raise ValueError(f"at most {one_copy * (1 + len(REGIONS))} tables can be generated")
    domains = [domain if k == 0 else replace(domain, name=f"{domain.name}_{REGIONS[k - 1]}",
                                             prefix=f"{domain.prefix}_{REGIONS[k - 1]}")
               for k in range(copies) for domain in DOMAINS]
    per_domain = [len(d.entities) for d in domains]
    sizes = list(per_domain)
    total = sum(sizes)
    if n_tables < total:  # fewer tables than core entities: shrink each domain evenly
        sizes = [max(1, n_tables * s // total) for s in per_domain]
    i = 0
    while sum(sizes) < n_tables:  # satellites, round-robin over domains
        if sizes[i % len(domains)] < per_domain[i % len(domains)] * (1 + len(DERIVED)):
            sizes[i % len(domains)] += 1
        i += 1
    while sum(sizes) > n_tables:
        j = max(range(len(sizes)), key=lambda k: sizes[k])
        sizes[j] -= 1
    tables: list[Table] = []
    for domain, size in zip(domains, sizes, strict=True):
        tables += domain_tables(domain, size, seed, prefixed=True)
    names = {t.name for t in tables}
    if "hr_employee" in names:  # satellites record who did it: foreign keys across domains
        for i, table in enumerate(tables):
            fks = [j for j, c in enumerate(table.columns) if c.kind == "fk"]
            if not table.phrases and fks and _rng(seed, "xfk", table.name).random() < 0.5:
                cols = list(table.columns)
                cols.insert(fks[-1] + 1, Column("recorded_by_employee_id", "fk", ref="hr_employee"))
                tables[i] = Table(table.name, tuple(cols[:20]), table.phrases)
    return _with_rows(tables, seed, rows)


# --- questions -----------------------------------------------------------------------------------


def words(name: str) -> str:
    """An identifier as words."""
    return re.sub(r"_+", " ", name).strip()


TEMPLATES: dict[str, tuple[str, ...]] = {
    "count_by": ("How many {E} are there for each {cat}?", "Number of {E} per {cat}", "Break down the {E} by {cat}",
                 "Count of {E} grouped by {cat}, largest first"),
    "sum_by": ("What is the total {m} of {E} by {cat}?", "Total {m} per {cat} for {E}",
               "Sum the {m} across {E}, split by {cat}", "{cat} with the highest total {m} among {E}"),
    "avg": ("What's the average {m} of {E}?", "Average {m} for {E} in 2023", "Mean {m} of {E} where {cat} is {val}",
            "How does the average {m} of {E} vary by {cat}?"),
    "trend": ("How many {E} per month in 2023, based on {d}?", "Monthly trend of {E} by {d}",
              "Show the number of {E} per year of {d}", "Weekly count of {E} over the last quarter ({d})"),
    "top": ("Top 10 {E} by {m}", "Which 5 {E} have the highest {m}?", "List the {E} with the largest {m}",
            "Show the {E} with the lowest {m}"),
    "filter": ("List all {E} where {cat} is '{val}'", "Show {E} with {cat} {val}", "Which {E} have {cat} set to {val}?",
               "How many {E} are {val}?"),
    "parent": ("Which {P} have the most {E}?", "Rank {P} by number of {E}", "Total {m} of {E} for each of the {P}",
               "Average {m} of {E} per one of the {P}"),
    "recent": ("Show the 20 most recent {E} by {d}", "Latest {E} (by {d})", "{E} from the last 30 days by {d}",
               "Were there any {E} with {d} in December 2023?"),
}


@dataclass(frozen=True)
class Written:
    """A generated question and what a query answering it reads: its tables, and its columns as `table.column` (the
    entity's table; the column each slot names; for a parent, the key joining them and the parent's key)."""

    text: str
    tables: frozenset[str]
    columns: frozenset[str]


def own_columns(table: Table) -> list[Column]:
    """A table's columns but its key and the padding every table shares: what a question about it names."""
    return [c for c in table.columns[1:] if c not in PADDING_COLUMNS]


def an_entity(db: Database, rng: random.Random) -> Table:
    """One of a database's core tables (those with everyday names), drawn at random."""
    return rng.choice([t for t in db.tables if t.phrases])


def questions_for(table: Table, by_name: dict[str, Table], rng: random.Random) -> list[str]:
    """Questions about one core table, phrased with its everyday names (one per applicable template)."""
    return [w.text for w in written_for(table, by_name, rng)]


def written_for(table: Table, by_name: dict[str, Table], rng: random.Random) -> list[Written]:
    """`questions_for`'s questions with what each reads."""
    cols = own_columns(table)
    measures = [c for c in cols if c.kind in MEASURES]
    cats = [c for c in cols if c.kind == "cat"]
    dates = [c for c in cols if c.kind in ("date", "ts")]
    parents = [by_name[c.ref] for c in cols if c.kind == "fk" and c.ref in by_name and by_name[c.ref].phrases]
    needs = {"count_by": cats, "sum_by": measures and cats, "avg": measures and cats, "trend": dates,
             "top": measures, "filter": cats, "parent": parents and measures, "recent": dates}
    out = []
    for kind, templates in TEMPLATES.items():
        if not needs[kind]:
            continue
        # the draws in the order the questions were first written with, so every bed's questions stay the same
        cat = rng.choice(cats) if cats else None
        template = rng.choice(templates)
        entity = rng.choice(table.phrases)
        value = rng.choice(cat.values) if cat else ""
        measure = rng.choice(measures) if measures else None
        date = rng.choice(dates) if dates else None
        parent = rng.choice(parents) if parents else None
        text = template.format(E=entity, cat=words(cat.name) if cat else "", val=value,
                               m=words(measure.name) if measure else "", d=words(date.name) if date else "",
                               P=rng.choice(parent.phrases) if parent else "")
        slots = {"{cat}": cat, "{val}": cat, "{m}": measure, "{d}": date}
        columns = {f"{table.name}.{c.name}" for slot, c in slots.items() if c and slot in template}
        tables = {table.name}
        if parent and "{P}" in template:
            key = next(c for c in cols if c.kind == "fk" and c.ref == parent.name)
            tables.add(parent.name)
            columns |= {f"{table.name}.{key.name}", f"{parent.name}.{parent.pk}"}
        out.append(Written(text[0].upper() + text[1:], frozenset(tables), frozenset(columns)))
    return out


def mentions_table(question: str, tables: list[Table]) -> bool:
    """Whether the question spells a table name verbatim (as the identifier, underscores and all)."""
    low = question.lower()
    return any(re.search(rf"\b{re.escape(t.name.lower())}\b", low) for t in tables)


def question_pool(tables: list[Table], seed: int, tag: str) -> list[str]:
    """Every question the templates write about the core tables of a database, shuffled, no repeats."""
    return [w.text for w in written_pool(tables, seed, tag)]


def written_pool(tables: list[Table], seed: int, tag: str) -> list[Written]:
    """`question_pool`'s questions with what each reads (a question written twice keeps its first reading)."""
    by_name = {t.name: t for t in tables}
    pool: dict[str, Written] = {}
    for round_ in range(3):  # several rounds: other phrases, templates and columns
        for table in tables:
            if table.phrases:
                for written in written_for(table, by_name, _rng(seed, "q", tag, table.name, round_)):
                    pool.setdefault(written.text, written)
    out = list(pool.values())
    _rng(seed, "shuffle", tag).shuffle(out)
    return out


#: Questions about one entity of each of two databases ({A} of the first, {B} of the second, {m} a measure of {A}).
CROSS_TEMPLATES = (
    "Compare the number of {A} with the number of {B} per month", "How many {A} and how many {B} were there in 2023?",
    "Show the total {m} of {A} next to the count of {B}", "For each month, list the {A} alongside the {B}",
    "Do months with more {A} also have more {B}?", "{A} and {B} by quarter", "Put our {A} side by side with the {B}",
    "Is there a link between {A} and {B}?",
)


def cross_questions(bed: list[Database], seed: int, n: int = 160) -> list[tuple[str, str, str]]:
    """`n` questions about two databases of the bed chosen at random, phrased with an entity's everyday name from
    each: (question, first database, second database).

    >>> bed = make_test_bed(4, seed=7)
    >>> [len(names) for _, *names in cross_questions(bed, 7, 3)] == [2, 2, 2], cross_questions(bed, 7) == cross_questions(bed, 7)
    (True, True)
    """
    rng = _rng(seed, "cross")
    out = []
    for _ in range(n):
        first, second = rng.sample(bed, 2)
        a, b = an_entity(first, rng), an_entity(second, rng)
        measures = [c for c in own_columns(a) if c.kind in MEASURES]
        template = rng.choice([t for t in CROSS_TEMPLATES if measures or "{m}" not in t])
        text = template.format(A=rng.choice(a.phrases), B=rng.choice(b.phrases),
                               m=words(rng.choice(measures).name) if measures else "")
        out.append((text[0].upper() + text[1:], first.name, second.name))
    return out


#: Questions about one entity with a joining word in them ({E} the entity, {P} a parent's, {cat}/{val} a category
#: and one of its values, {m} a measure, {d} a date): what routing in parts must leave to one database.
JOINED_TEMPLATES = (
    "Group the {E} by {cat} and count them", "List the {E} and their {cat}", "Show the {E} by {cat} and by {d}",
    "Which {P} have the most {E}, and how many?", "Total {m} and average {m} of {E}",
    "How many {E} are there, and what is their total {m}?", "Count the {E} per {cat} and sort them",
    "List {E} with {cat} {val} and {m} above average", "Show the {E} alongside their {P}",
    "Compare the {m} of {E} with last year",
)


def joined_questions(bed: list[Database], seed: int, n: int = 160) -> list[tuple[str, str]]:
    """`n` questions about one entity of a database chosen at random, each with a joining word ("and",
    "alongside", "compare … with"): (question, database).

    >>> bed = make_test_bed(4, seed=7)
    >>> len(joined_questions(bed, 7, 5)), joined_questions(bed, 7) == joined_questions(bed, 7)
    (5, True)
    """
    rng = _rng(seed, "joined")
    out: list[tuple[str, str]] = []
    while len(out) < n:
        db = rng.choice(bed)
        table = an_entity(db, rng)
        by_name = {t.name: t for t in db.tables}
        cols = own_columns(table)
        kinds = {"{m}": [c for c in cols if c.kind in MEASURES], "{cat}": [c for c in cols if c.kind == "cat"],
                 "{d}": [c for c in cols if c.kind in ("date", "ts")],
                 "{P}": [by_name[c.ref] for c in cols if c.kind == "fk" and c.ref in by_name and by_name[c.ref].phrases]}
        template = rng.choice(JOINED_TEMPLATES)
        if any(key in template and not found for key, found in kinds.items()):
            continue
        cat = rng.choice(kinds["{cat}"]) if kinds["{cat}"] else None
        text = template.format(
            E=rng.choice(table.phrases), cat=words(cat.name) if cat else "", val=rng.choice(cat.values) if cat else "",
            m=words(rng.choice(kinds["{m}"]).name) if kinds["{m}"] else "",
            d=words(rng.choice(kinds["{d}"]).name) if kinds["{d}"] else "",
            P=rng.choice(rng.choice(kinds["{P}"]).phrases) if kinds["{P}"] else "")
        out.append((text[0].upper() + text[1:], db.name))
    return out


#: Questions setting two categories of one entity side by side, named by their values only, not by the column
#: ({E} the entity, {a} and {b} two values of one of its categorical columns, {m} a measure): "Are urgent tickets
#: closed faster than low ones?" names the priorities, never the word "priority".
COMPARED_TEMPLATES = (
    "Are {a} {E} more common than {b} ones?", "Do {a} {E} have a higher {m} than {b} {E}?",
    "How many {E} are {a} and how many are {b}?", "{a} versus {b} {E} per month",
    "Which is bigger, the {a} {E} or the {b} ones?", "Average {m} of {a} {E} against {b} {E}",
    "Is the share of {a} {E} growing faster than the share of {b} ones?", "Compare {a} {E} with {b} {E} in 2023",
)


def compared_questions(bed: list[Database], seed: int, n: int = 160) -> list[tuple[str, str]]:
    """`n` questions naming two values of one categorical column of an entity, in a database chosen at random
    (values its rows hold, so a profile has them): (question, database).

    >>> bed = make_test_bed(4, seed=7)
    >>> len(compared_questions(bed, 7, 5)), compared_questions(bed, 7) == compared_questions(bed, 7)
    (5, True)
    """
    rng = _rng(seed, "compared")
    out: list[tuple[str, str]] = []
    while len(out) < n:
        db = rng.choice(bed)
        table = an_entity(db, rng)
        cols = own_columns(table)
        held = {c.name: sorted({str(row[i]) for row in table.rows if row[i] is not None})
                for i, c in enumerate(table.columns) if c.kind == "cat" and c in cols}
        held = {name: values for name, values in held.items() if len(values) >= 2}
        measures = [c for c in cols if c.kind in MEASURES]
        template = rng.choice([t for t in COMPARED_TEMPLATES if measures or "{m}" not in t])
        if not held:
            continue
        a, b = rng.sample(held[rng.choice(sorted(held))], 2)
        text = template.format(E=rng.choice(table.phrases), a=a, b=b,
                               m=words(rng.choice(measures).name) if measures else "")
        out.append((text[0].upper() + text[1:], db.name))
    return out


#: Test-bed sizes: a few big databases on purpose; the rest 3 to 18 tables.
BIG_SIZES = (60, 45, 36, 28)


def make_test_bed(n_databases: int = 36, seed: int = 42, *, tests_per_db: int = 8, rows: tuple[int, int] = (3, 6),
             width: tuple[int, int] = (6, 16), big_sizes: tuple[int, ...] = BIG_SIZES) -> list[Database]:
    """One database per domain (the first `n_databases` domains), sizes 3..60, questions from each schema."""
    domains = list(DOMAINS[:n_databases])
    rng = _rng(seed, "sizes", n_databases)
    roomy = [i for i, d in enumerate(domains) if len(d.entities) >= 7]
    big = rng.sample(roomy, min(len(big_sizes), max(1, len(domains) // 8), len(roomy)))
    out = []
    for i, domain in enumerate(domains):
        size = big_sizes[big.index(i)] if i in big else rng.randint(3, 18)
        tables = _with_rows(domain_tables(domain, size, seed, width=width), seed, rows)
        pool = question_pool(tables, seed, domain.name)
        n_samples = _rng(seed, "n_samples", domain.name).randint(5, 8)
        out.append(Database(domain.name, domain.description, tables, pool[:n_samples],
                            pool[n_samples:n_samples + tests_per_db]))
    return out


def make_extended_bed(seed: int = 42, *, tests_per_db: int = 8, rows: tuple[int, int] = (3, 6),
                      width: tuple[int, int] = (6, 16)) -> list[Database]:
    """The 36-database test bed, plus a sibling of eight of its domains (`SIBLINGS`: every entity and a few
    satellites), with the databases of `KEYLESS` written without declared keys."""
    bed = make_test_bed(len(DOMAINS), seed, tests_per_db=tests_per_db, rows=rows, width=width)
    for domain in SIBLINGS:
        size = len(domain.entities) + _rng(seed, "sibling", domain.name).randint(2, 6)
        tables = _with_rows(domain_tables(domain, size, seed, width=width), seed, rows)
        pool = question_pool(tables, seed, domain.name)
        n_samples = _rng(seed, "n_samples", domain.name).randint(5, 8)
        bed.append(Database(domain.name, domain.description, tables, pool[:n_samples],
                            pool[n_samples:n_samples + tests_per_db]))
    for db in bed:
        db.keys = db.name not in KEYLESS
    return bed


# --- writing -------------------------------------------------------------------------------------


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def ddl_script(tables: list[Table], *, dialect: str = "sqlite", keys: bool = True) -> str:
    """CREATE TABLE and INSERT statements; foreign keys inline (SQLite) or added at the end (PostgreSQL,
    which wants the referenced table to exist); without `keys`, no PRIMARY KEY and no REFERENCES."""
    pk_of = {t.name: t.pk for t in tables} if keys else {}
    parts, later = [], []
    for table in tables:
        defs = [f'"{c.name}" {c.sql_type}{" PRIMARY KEY" if c.kind == "pk" and keys else ""}'
                for c in table.columns]
        fks = [f'FOREIGN KEY ("{c.name}") REFERENCES "{c.ref}" ("{pk_of[c.ref]}")'
               for c in table.columns if c.kind == "fk" and c.ref in pk_of]
        if dialect == "sqlite":
            defs += fks
        else:
            later += [f'ALTER TABLE "{table.name}" ADD {fk};' for fk in fks]
        parts.append(f'CREATE TABLE "{table.name}" ({", ".join(defs)});')
        if table.rows:
            values = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in table.rows)
            parts.append(f'INSERT INTO "{table.name}" VALUES {values};')
    return "\n".join(parts + later)


def write_sqlite(tables: list[Table], path: Path, *, keys: bool = True) -> Path:
    """Write the tables and rows to a new SQLite file (without declared keys unless `keys`)."""
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.executescript("BEGIN;\n" + ddl_script(tables, keys=keys) + "\nCOMMIT;")
    finally:
        conn.close()
    return path
