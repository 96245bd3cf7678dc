"""The latency tables' texts: phrases of signs, announcements and receipts in English and
Chinese, each row made distinct by random codes and numbers (``bench.search.latency``)."""

from __future__ import annotations

import itertools

import numpy as np

_TEMPLATES = (
    "Gate {code} for the flight to {city} is now boarding",
    "Invoice number {num} for {item} is due on Friday",
    "Order {code} of {item} ships tomorrow",
    "Meeting room {code} is booked by {name} until {hour} o'clock",
    "The train to {city} leaves from platform {small}",
    "{item} now only {num} dollars",
    "Temperature in {city} will reach {small} degrees",
    "Call {name} about the {item} order {code}",
    "Aisle {code}: {item}",
    "Welcome to {city}, enjoy your stay",
    "Level {code} of the car park is full",
    "{name} will present the budget at {hour} o'clock",
    "{city_zh}站 {small} 号站台",
    "订单 {code} 的{item_zh}已发货",
    "会议室 {code} 下午 {hour} 点 {name}",
    "今日特价 {item_zh} {num} 元",
    "出口 {code} 通往{city_zh}",
    "发票号码 {num} {item_zh}",
    "欢迎光临{city_zh}",
    "{city_zh}明天有雨 气温 {small} 度",
    "请在 {hour} 点前登机 登机口 {code}",
    "停车场 {code} 已满",
)
_WORDS = {
    "city": (
        "Berlin",
        "Lisbon",
        "Osaka",
        "Denver",
        "Nairobi",
        "Lima",
        "Oslo",
        "Hanoi",
        "Quito",
        "Dublin",
        "Perth",
        "Seville",
    ),
    "city_zh": (
        "北京",
        "上海",
        "广州",
        "深圳",
        "成都",
        "杭州",
        "南京",
        "西安",
        "重庆",
        "武汉",
        "厦门",
        "青岛",
    ),
    "item": (
        "apples",
        "coffee beans",
        "printer paper",
        "running shoes",
        "green tea",
        "laptops",
        "batteries",
        "winter coats",
        "olive oil",
        "desk lamps",
        "rice",
        "headphones",
    ),
    "item_zh": (
        "苹果",
        "咖啡豆",
        "打印纸",
        "跑鞋",
        "绿茶",
        "笔记本电脑",
        "电池",
        "冬季外套",
        "橄榄油",
        "台灯",
        "大米",
        "耳机",
    ),
    "name": (
        "Anna Weber",
        "Ken Sato",
        "Maria Lopez",
        "Tom Baker",
        "Li Wei",
        "Sara Cohen",
        "Omar Haddad",
        "Nina Petrova",
        "Jon Berg",
        "Ada Mensah",
    ),
}
LATENCY_QUERIES = (
    "boarding gate",
    "invoice due",
    "train to the coast",
    "special offer",
    "who presents the budget",
    "weather forecast rain",
    "car park full",
    "order shipped",
    "发票",
    "会议室",
    "今日特价",
    "登机口",
    "停车场",
    "明天下雨",
)


def phrase_bank() -> list[str]:
    """Every template with every choice of its words (333 phrases), codes and numbers
    left to fill."""
    phrases = []
    for template in _TEMPLATES:
        slots = [slot for slot in _WORDS if "{" + slot + "}" in template]
        for words in itertools.product(*(_WORDS[slot] for slot in slots)):
            phrase = template
            for slot, word in zip(slots, words, strict=True):
                phrase = phrase.replace("{" + slot + "}", word)
            phrases.append(phrase)
    return phrases


def random_code(rng: np.random.Generator) -> str:
    return f"{'ABCDEFGH'[int(rng.integers(8))]}{int(rng.integers(1, 100))}"


def row_text(phrase: str, rng: np.random.Generator) -> str:
    """A phrase of the bank with random codes and numbers."""
    return phrase.format(
        code=random_code(rng),
        num=int(rng.integers(100, 100_000)),
        hour=int(rng.integers(1, 13)),
        small=int(rng.integers(1, 40)),
    )


def latency_queries(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` queries: a third codes (B7, F42), the rest English and Chinese phrases."""
    return [
        random_code(rng) if i % 3 == 2 else LATENCY_QUERIES[int(rng.integers(len(LATENCY_QUERIES)))]
        for i in range(count)
    ]
